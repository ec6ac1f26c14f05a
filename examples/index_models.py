"""Example models whose integer inputs index tensors, for ``export_compile --model``.
An out-of-range id makes the compiled kernels abort the process, so export_compile
records each such input's valid values and the runners refuse the rest up front."""

from __future__ import annotations

import torch
from torch import nn


class LookupModel(nn.Module):
    """Four integer inputs of one batch size B, one per kind of index op:

    - ``ids`` [B, 64]: token ids into an embedding of ``vocab`` rows (through views);
    - ``rows`` [B, 4]: index_select of a 12-row table, and also tensor indexing of a
      10-row one, so its valid values are where both uses agree: [0, 9];
    - ``picks`` [B, 3]: gather along dim 1 of a [B, 7] table;
    - ``slots`` [B, 3]: tensor indexing of a 9-row table, where negatives wrap: [-9, 8].

    Every output has the batch dim first, so Triton can batch requests.
    """

    def __init__(self, vocab: int = 1000, width: int = 64) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.embedding = nn.Embedding(vocab, width)
        with torch.no_grad():
            self.embedding.weight.copy_(torch.randn(vocab, width, generator=generator))
        self.register_buffer("table", torch.randn(12, 5, generator=generator))
        self.register_buffer("small", torch.randn(10, 5, generator=generator))
        self.register_buffer("scores", torch.randn(1, 7, generator=generator))
        self.register_buffer("slot_table", torch.randn(9, 4, generator=generator))

    def forward(
        self, ids: torch.Tensor, rows: torch.Tensor, picks: torch.Tensor, slots: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        batch = ids.shape[0]
        embedded = self.embedding(ids.reshape(-1)).reshape(batch, ids.shape[1], -1)
        selected = torch.index_select(self.table, 0, rows.reshape(-1)).reshape(batch, rows.shape[1], -1)
        selected = selected + self.small[rows]
        picked = torch.gather(self.scores.expand(batch, -1), 1, picks)
        slotted = self.slot_table[slots]
        return embedded, selected, picked, slotted


def lookup_inputs(batch: int = 2, seed: int = 3) -> tuple[torch.Tensor, ...]:
    """Seeded in-range inputs of LookupModel, every bound included once."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 1000, (batch, 64), generator=generator)
    rows = torch.randint(0, 10, (batch, 4), generator=generator)
    picks = torch.randint(0, 7, (batch, 3), generator=generator)
    slots = torch.randint(-9, 9, (batch, 3), generator=generator)
    ids[0, :2] = torch.tensor([0, 999])
    rows[0, :2] = torch.tensor([0, 9])
    picks[0, :2] = torch.tensor([0, 6])
    slots[0, :2] = torch.tensor([-9, 8])
    return ids, rows, picks, slots


def lookup_model(vocab: int = 1000, width: int = 64) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The module and its example inputs (int64, in range, batch 2). Export with
    --dynamic-dim 0.0,1.0,2.0,3.0=1:8 for a batch of 1 to 8."""
    return LookupModel(vocab, width), lookup_inputs()


class EmbeddingModel(nn.Module):
    """Token ids [B, T] into an embedding, the shape of a transformer's first layer."""

    def __init__(self, vocab: int = 1000, width: int = 128) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, width)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embedding(ids)


def embedding_model(vocab: int = 1000, width: int = 128) -> tuple[nn.Module, tuple[torch.Tensor]]:
    """The module and a [2, 64] int64 example of in-range ids."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(5)
    return EmbeddingModel(vocab, width), (torch.randint(0, vocab, (2, 64), generator=generator),)


class MaskedMeanModel(nn.Module):
    """Token ids [B, T] and a 0/1 mask [B, T] (any integer dtype): the mean of the
    embeddings of the unmasked tokens, then a linear layer. The ids index the
    embedding, so export records their range; the mask indexes nothing."""

    def __init__(self, vocab: int = 1000, width: int = 32) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, width)
        self.head = nn.Linear(width, 4)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = (mask != 0).unsqueeze(-1).to(self.embedding.weight.dtype)
        summed = (self.embedding(ids) * keep).sum(dim=1)
        return self.head(summed / keep.sum(dim=1).clamp(min=1.0))


def masked_mean_model(vocab: int = 1000, width: int = 32) -> nn.Module:
    """The module only, for random integer inputs: --dtype int64 --input-shape 2,16
    --input-shape 2,16 --input-values 0=0:999 (the mask draws 0 and 1)."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return MaskedMeanModel(vocab, width)


class ComputedIndexModel(nn.Module):
    """Indices computed from integer inputs before they index, one input per kind of
    index op, batch B first in every input and output:

    - ``ids`` [B, 16]: ``embedding(ids * 3 + 7)`` of 1000 rows (valid ids 0..330);
    - ``picks`` [B, 8]: ``take(flat, picks * 2 + 1)`` of 5000 elements (negatives wrap);
    - ``slots`` [B, 4]: ``scatter`` and ``scatter_add`` into 20 columns at ``slots + 2``;
    - ``cells`` [B, 4]: ``index_put`` into 30 columns at ``cells + 1`` (negatives wrap);
    - ``rows`` [B, 4]: ``index_select`` of 12 rows at ``rows * 2`` (valid rows 0..5);
    - ``spots`` [B, 4]: tensor indexing of the same 12 rows at ``spots - 1`` (negatives wrap);
    - ``cols`` [B, 3]: ``gather`` of 7 columns at ``cols - 2``;
    - ``bags`` [B, 6]: ``embedding_bag`` (sum) of 50 rows at ``bags * 2``.
    """

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(1)
        self.embedding = nn.Embedding(1000, 8)
        self.bag = nn.EmbeddingBag(50, 8, mode="sum")
        with torch.no_grad():
            self.embedding.weight.copy_(torch.randn(1000, 8, generator=generator))
            self.bag.weight.copy_(torch.randn(50, 8, generator=generator))
        self.register_buffer("flat", torch.randn(5000, generator=generator))
        self.register_buffer("table", torch.randn(12, 3, generator=generator))
        self.register_buffer("scores", torch.randn(1, 7, generator=generator))

    def forward(self, ids: torch.Tensor, picks: torch.Tensor, slots: torch.Tensor, cells: torch.Tensor,
                rows: torch.Tensor, spots: torch.Tensor, cols: torch.Tensor,
                bags: torch.Tensor) -> tuple[torch.Tensor, ...]:
        batch = ids.shape[0]
        embedded = self.embedding(ids * 3 + 7)
        taken = torch.take(self.flat, picks * 2 + 1)
        ones = torch.ones(slots.shape, dtype=torch.float32)
        scattered = torch.zeros(batch, 20).scatter(1, slots + 2, ones).scatter_add(1, slots + 2, ones)
        batch_rows = torch.arange(batch).unsqueeze(1).expand(-1, cells.shape[1])
        put = torch.zeros(batch, 30).index_put((batch_rows, cells + 1), torch.ones(cells.shape))
        selected = torch.index_select(self.table, 0, (rows * 2).reshape(-1)).reshape(batch, -1)
        spotted = self.table[spots - 1].reshape(batch, -1)
        gathered = torch.gather(self.scores.expand(batch, -1), 1, cols - 2)
        bagged = self.bag(bags * 2)
        return embedded, taken, scattered, put, selected, spotted, gathered, bagged


def computed_index_inputs(batch: int = 2, seed: int = 4) -> tuple[torch.Tensor, ...]:
    """Seeded in-range inputs of ComputedIndexModel, every bound included once."""
    generator = torch.Generator().manual_seed(seed)
    bounds = {"ids": (0, 330, 16), "picks": (-2500, 2499, 8), "slots": (-2, 17, 4), "cells": (-31, 28, 4),
              "rows": (0, 5, 4), "spots": (-11, 12, 4), "cols": (2, 8, 3), "bags": (0, 24, 6)}
    inputs = []
    for low, high, width in bounds.values():
        values = torch.randint(low, high + 1, (batch, width), generator=generator)
        values[0, :2] = torch.tensor([low, high])
        inputs.append(values)
    return tuple(inputs)


def computed_index_model() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The module and its example inputs (int64, in range, batch 2). Export with
    --dynamic-dim 0.0,1.0,2.0,3.0,4.0,5.0,6.0,7.0=1:8 for a batch of 1 to 8."""
    return ComputedIndexModel(), computed_index_inputs()


class LateIndexModel(nn.Module):
    """Indices that only become indexing later, or that are read from a tensor:

    - ``logits`` [6, 5], ``targets`` [6]: ``cross_entropy(logits, targets + 1)``, whose
      gather Inductor's decompositions make (valid targets -1..3, and -101, the ignored
      index -100 less one);
    - ``grid`` [4, 2, 9], ``mask`` [4, 2] bool, ``cols`` [K]: ``grid[mask, cols * 2] = 1``, where
      the two-dim mask covers dims 0 and 1, so ``cols * 2`` indexes dim 2 (valid cols -4..4);
    - ``row`` [] int64: ``table[row.item() + 1]`` (valid row -11..8).
    """

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.arange(60.0).view(10, 6))

    def forward(self, logits: torch.Tensor, targets: torch.Tensor, grid: torch.Tensor, mask: torch.Tensor,
                cols: torch.Tensor, row: torch.Tensor) -> tuple[torch.Tensor, ...]:
        loss = nn.functional.cross_entropy(logits, targets + 1, reduction="none")
        marked = grid.clone()
        marked[mask, cols * 2] = 1.0
        picked = self.table[row.item() + 1]
        return loss, marked, picked


def late_index_inputs() -> tuple[torch.Tensor, ...]:
    """In-range inputs of LateIndexModel (a mask with three True, so three cols)."""
    generator = torch.Generator().manual_seed(6)
    mask = torch.tensor([[True, False], [False, True], [False, False], [True, False]])
    return (torch.randn(6, 5, generator=generator), torch.tensor([-1, 0, 1, 2, 3, -101]),
            torch.zeros(4, 2, 9), mask, torch.tensor([-4, 0, 4]), torch.tensor(8))


def late_index_model() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The module and its example inputs (static shapes)."""
    return LateIndexModel(), late_index_inputs()
