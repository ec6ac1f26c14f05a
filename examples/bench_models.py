"""The three models of the real-model comparison (docs/performance-real-models.md),
built from transformers config classes with seeded random weights, as the zoo's are:
no download, no tokenizer. Sized for a 2-core machine, with the full models' layer
kinds and per-layer shapes:

- ``bert_base4``: BERT-base cut to 4 layers and hidden 256 (4 heads, FFN 1024,
  BERT's 30522-token vocabulary), sequence 128;
- ``resnet18``: ResNet-18's stages (basic blocks 2-2-2-2, widths 64-128-256-512)
  on 224x224 images;
- ``causal_lm``: a Llama-style causal LM (4 layers, hidden 256, grouped-query
  attention, SwiGLU, vocabulary 8000), logits for a 128-token prompt;
- the vision set, full size, 1000-class logits of 224x224 images: ``resnet50``,
  ``efficientnet_b0``, ``mobilenet_v2``, ``convnext_tiny`` and ``vit_tiny`` (ViT with
  DeiT-Tiny's sizes: hidden 192, 12 layers, 3 heads, patch 16).

The vision models take PyTorch's own initialisation, and their BatchNorm statistics
are measured on random batches: with transformers' N(0, 0.02) weights and BatchNorm at
its initial statistics, activations of the deep convolutional ones shrink to zero and
denormals, and every runtime's timing would measure that instead.

Each factory returns the module in eval mode and keyword inputs at ``batch``.
Needs the ``hf`` extra.

    python scripts/bench_real_models.py            # exports, verifies and benchmarks all three
"""

from __future__ import annotations

from collections.abc import Callable

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


def _vision(make: Callable[[], nn.Module], batch: int, image: int,
            seed: int) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """The model ``make`` builds, with PyTorch's initialisation and BatchNorm statistics
    measured on two random batches of 8; in eval mode, with pixel_values [B, 3, image,
    image]."""
    with _seeded(seed):
        model = make()
        for module in model.modules():
            if module is not model and hasattr(module, "reset_parameters"):
                module.reset_parameters()
        norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        if norms:
            for norm in norms:
                norm.reset_running_stats()
                norm.momentum = None  # a cumulative average
            model.train()
            with torch.no_grad():
                for _ in range(2):
                    model(pixel_values=torch.randn(8, 3, image, image))
    generator = torch.Generator().manual_seed(seed)
    return model.eval(), {"pixel_values": torch.randn(batch, 3, image, image, generator=generator)}


def resnet50(batch: int = 1, image: int = 224, seed: int = 0) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """ResNetForImageClassification with ResNet-50's stages (bottlenecks 3-4-6-3)."""
    from transformers import ResNetConfig, ResNetForImageClassification

    return _vision(lambda: ResNetForImageClassification(ResNetConfig(num_labels=1000)), batch, image, seed)


def resnet18_classifier(batch: int = 1, image: int = 224, seed: int = 0) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """ResNetForImageClassification with ResNet-18's stages (basic blocks 2-2-2-2), for
    the int8 comparison (scripts/bench_int8.py): 1000-class logits."""
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(embedding_size=64, hidden_sizes=[64, 128, 256, 512], depths=[2, 2, 2, 2],
                          layer_type="basic", num_labels=1000)
    return _vision(lambda: ResNetForImageClassification(config), batch, image, seed)


def efficientnet_b0(batch: int = 1, image: int = 224, seed: int = 0) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """EfficientNetForImageClassification at B0's width, depth and head (1280)."""
    from transformers import EfficientNetConfig, EfficientNetForImageClassification

    config = EfficientNetConfig(width_coefficient=1.0, depth_coefficient=1.0, image_size=image, hidden_dim=1280,
                                dropout_rate=0.2, num_labels=1000)
    return _vision(lambda: EfficientNetForImageClassification(config), batch, image, seed)


def mobilenet_v2(batch: int = 1, image: int = 224, seed: int = 0) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """MobileNetV2ForImageClassification, depth multiplier 1.0."""
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    return _vision(lambda: MobileNetV2ForImageClassification(MobileNetV2Config(image_size=image, num_labels=1000)),
                   batch, image, seed)


def convnext_tiny(batch: int = 1, image: int = 224, seed: int = 0) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """ConvNextForImageClassification with ConvNeXt-T's stages (3-3-9-3, 96-768)."""
    from transformers import ConvNextConfig, ConvNextForImageClassification

    return _vision(lambda: ConvNextForImageClassification(ConvNextConfig(num_labels=1000)), batch, image, seed)


def vit_tiny(batch: int = 1, image: int = 224, seed: int = 0) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """ViTForImageClassification with DeiT-Tiny's sizes."""
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(hidden_size=192, num_hidden_layers=12, num_attention_heads=3, intermediate_size=768,
                       image_size=image, patch_size=16, num_labels=1000)
    return _vision(lambda: ViTForImageClassification(config), batch, image, seed)


FACTORIES = {"bert_base4": bert_base4, "resnet18": resnet18, "causal_lm": causal_lm}
# The vision set of the CPU comparison (issue: the fastest verified package on the CPU).
VISION = {"resnet50": resnet50, "efficientnet_b0": efficientnet_b0, "mobilenet_v2": mobilenet_v2,
          "convnext_tiny": convnext_tiny, "vit_tiny": vit_tiny}
FACTORIES.update(VISION)
