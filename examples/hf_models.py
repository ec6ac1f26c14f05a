"""Tiny Hugging Face transformers models for ``export_compile --model``, built from
their config classes with seeded random weights: no download, no tokenizer, no hub
access (needs the ``hf`` extra: pip install -e '.[hf]'). Each factory returns the
module in eval mode and its example inputs, small enough to compile in seconds.

    export_compile --model examples.hf_models:bert --save-reference ref/
    export_compile --model examples.hf_models:bert --model-arg keywords=True \
        --dynamic-dim 0.0,1.0=1:8
    export_compile --model examples.hf_models:resnet --dynamic-dim 0.0=1:8

Most of these models return a transformers ``ModelOutput``: the Python API rebuilds
it where transformers imports, else returns a dict by field name; the runners and
Triton see the flat outputs, named by field (``last_hidden_state``, ``logits``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

# A factory's example inputs: positional, in forward's order, or (keywords=True) the
# forward's keyword arguments by name.
Inputs = tuple[torch.Tensor, ...] | dict[str, torch.Tensor]

# Small enough to compile in well under 30 s on two cores, big enough to run every
# layer kind the full-size model has.
VOCAB = 1000
HIDDEN = 64
LAYERS = 2
HEADS = 4
INTERMEDIATE = 128


@contextlib.contextmanager
def _seeded(seed: int = 0) -> Iterator[None]:
    """Weights drawn from ``seed``, without touching the caller's random state."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        yield


def _token_inputs(batch: int, sequence: int, seed: int, keywords: bool) -> Inputs:
    """Seeded token ids in [0, VOCAB) and an attention mask of ones whose last row
    pads its final quarter (zeros), as a tokenizer's padded batch has: positional
    (input_ids, attention_mask), or by name with ``keywords``."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (batch, sequence), generator=generator)
    mask = torch.ones(batch, sequence, dtype=torch.int64)
    mask[-1, sequence - sequence // 4:] = 0
    return {"input_ids": ids, "attention_mask": mask} if keywords else (ids, mask)


def bert(batch: int = 2, sequence: int = 16, seed: int = 0, keywords: bool = False) -> tuple[nn.Module, Inputs]:
    """BertModel; inputs (input_ids [B, S] int64, attention_mask [B, S] int64).
    Returns BaseModelOutputWithPoolingAndCrossAttentions (last_hidden_state
    [B, S, 64], pooler_output [B, 64])."""
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=INTERMEDIATE, max_position_embeddings=128,
    )
    with _seeded(seed):
        model = BertModel(config).eval()
    return model, _token_inputs(batch, sequence, seed, keywords)


def gpt2(batch: int = 2, sequence: int = 16, seed: int = 0, keywords: bool = False) -> tuple[nn.Module, Inputs]:
    """GPT2LMHeadModel, a causal LM without a KV cache. Its forward takes the cache
    second (input_ids, cache, attention_mask, ...), so positionally it gets
    (input_ids [B, S],) alone; with ``keywords`` input_ids and attention_mask.
    Returns CausalLMOutputWithCrossAttentions (logits [B, S, 1000])."""
    from transformers import GPT2Config, GPT2LMHeadModel

    # bos/eos ids inside the tiny vocabulary (GPT-2's own, 50256, is not).
    config = GPT2Config(
        vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_inner=INTERMEDIATE, n_positions=128,
        use_cache=False, bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1,
    )
    with _seeded(seed):
        model = GPT2LMHeadModel(config).eval()
    inputs = _token_inputs(batch, sequence, seed, keywords)
    return model, inputs if keywords else inputs[:1]


def llama(batch: int = 2, sequence: int = 16, seed: int = 0, keywords: bool = False) -> tuple[nn.Module, Inputs]:
    """LlamaForCausalLM without a KV cache (rotary embeddings, RMSNorm, SwiGLU,
    grouped-query attention); inputs (input_ids [B, S], attention_mask [B, S]).
    Returns CausalLMOutputWithPast (logits [B, S, 1000])."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=2, intermediate_size=INTERMEDIATE, max_position_embeddings=128, use_cache=False,
    )
    with _seeded(seed):
        model = LlamaForCausalLM(config).eval()
    return model, _token_inputs(batch, sequence, seed, keywords)


def t5_encoder(batch: int = 2, sequence: int = 16, seed: int = 0, keywords: bool = False) -> tuple[nn.Module, Inputs]:
    """T5EncoderModel (relative position buckets); inputs (input_ids [B, S],
    attention_mask [B, S]). Returns BaseModelOutputWithPastAndCrossAttentions
    (last_hidden_state [B, S, 64])."""
    from transformers import T5Config, T5EncoderModel

    config = T5Config(
        vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=INTERMEDIATE, num_layers=LAYERS,
        num_heads=HEADS, use_cache=False,
    )
    with _seeded(seed):
        model = T5EncoderModel(config).eval()
    return model, _token_inputs(batch, sequence, seed, keywords)


def _pixels(batch: int, size: int, seed: int, keywords: bool) -> Inputs:
    generator = torch.Generator().manual_seed(seed)
    pixels = torch.randn(batch, 3, size, size, generator=generator)
    return {"pixel_values": pixels} if keywords else (pixels,)


def vit(batch: int = 2, image: int = 32, seed: int = 0, keywords: bool = False) -> tuple[nn.Module, Inputs]:
    """ViTModel with 8x8 patches of a 32x32 image; input pixel_values [B, 3, 32, 32].
    Returns BaseModelOutputWithPooling (last_hidden_state [B, 17, 64], pooler_output
    [B, 64])."""
    from transformers import ViTConfig, ViTModel

    config = ViTConfig(
        image_size=image, patch_size=8, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=INTERMEDIATE,
    )
    with _seeded(seed):
        model = ViTModel(config).eval()
    return model, _pixels(batch, image, seed, keywords)


def resnet(batch: int = 2, image: int = 64, seed: int = 0, keywords: bool = False) -> tuple[nn.Module, Inputs]:
    """ResNetModel (basic blocks, two stages); input pixel_values [B, 3, H, W].
    Returns BaseModelOutputWithPoolingAndNoAttention (last_hidden_state, pooler_output)."""
    from transformers import ResNetConfig, ResNetModel

    config = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic")
    with _seeded(seed):
        model = ResNetModel(config).eval()
    return model, _pixels(batch, image, seed, keywords)


def convnext(batch: int = 2, image: int = 64, seed: int = 0, keywords: bool = False) -> tuple[nn.Module, Inputs]:
    """ConvNextModel (two stages); input pixel_values [B, 3, H, W]. Returns
    BaseModelOutputWithPoolingAndNoAttention (last_hidden_state, pooler_output)."""
    from transformers import ConvNextConfig, ConvNextModel

    config = ConvNextConfig(hidden_sizes=[16, 32], depths=[1, 1], num_stages=2)
    with _seeded(seed):
        model = ConvNextModel(config).eval()
    return model, _pixels(batch, image, seed, keywords)


# Every factory, by name: what the zoo covers.
FACTORIES = {
    "bert": bert,
    "gpt2": gpt2,
    "llama": llama,
    "t5_encoder": t5_encoder,
    "vit": vit,
    "resnet": resnet,
    "convnext": convnext,
}
