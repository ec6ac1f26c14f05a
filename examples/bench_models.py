"""The three models of the real-model comparison (docs/performance-real-models.md),
built from transformers config classes with seeded random weights, as the zoo's are:
no download, no tokenizer. Sized for a 2-core machine, with the full models' layer
kinds and per-layer shapes:

- ``bert_base4``: BERT-base cut to 4 layers and hidden 256 (4 heads, FFN 1024,
  BERT's 30522-token vocabulary), sequence 128;
- ``resnet18``: ResNet-18's stages (basic blocks 2-2-2-2, widths 64-128-256-512)
  on 224x224 images;
- ``causal_lm``: a Llama-style causal LM (4 layers, hidden 256, grouped-query
  attention, SwiGLU, vocabulary 8000), logits for a 128-token prompt.

Each factory returns the module in eval mode and keyword inputs at ``batch``.
Needs the ``hf`` extra.

    python scripts/bench_real_models.py            # exports, verifies and benchmarks all three
"""

from __future__ import annotations

import torch
from torch import nn

from examples.hf_models import _seeded


def _tokens(batch: int, sequence: int, vocab: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, sequence), generator=generator)
    return {"input_ids": ids, "attention_mask": torch.ones(batch, sequence, dtype=torch.int64)}


def bert_base4(batch: int = 1, sequence: int = 128, seed: int = 0) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """BertModel, 4 layers, hidden 256; inputs input_ids and attention_mask [B, S]."""
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=30522, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=1024, max_position_embeddings=512)
    with _seeded(seed):
        model = BertModel(config).eval()
    return model, _tokens(batch, sequence, config.vocab_size, seed)


def resnet18(batch: int = 1, image: int = 224, seed: int = 0) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """ResNetModel with ResNet-18's stages; input pixel_values [B, 3, 224, 224]."""
    from transformers import ResNetConfig, ResNetModel

    config = ResNetConfig(embedding_size=64, hidden_sizes=[64, 128, 256, 512], depths=[2, 2, 2, 2],
                          layer_type="basic")
    with _seeded(seed):
        model = ResNetModel(config).eval()
    generator = torch.Generator().manual_seed(seed)
    return model, {"pixel_values": torch.randn(batch, 3, image, image, generator=generator)}


def causal_lm(batch: int = 1, sequence: int = 128, seed: int = 0) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """LlamaForCausalLM, 4 layers, hidden 256, no KV cache; inputs input_ids and
    attention_mask [B, S]; returns logits [B, S, 8000]."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=8000, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=688, max_position_embeddings=256,
                         use_cache=False)
    with _seeded(seed):
        model = LlamaForCausalLM(config).eval()
    return model, _tokens(batch, sequence, config.vocab_size, seed)


FACTORIES = {"bert_base4": bert_base4, "resnet18": resnet18, "causal_lm": causal_lm}
