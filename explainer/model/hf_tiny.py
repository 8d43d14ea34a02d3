"""A tiny random transformers ``DiffusionGemmaForBlockDiffusion``, built locally (the config follows the tiny one of
transformers' ``tests/models/diffusion_gemma/test_modeling_diffusion_gemma.py``; ``SOURCES.md``).

No download: the config is spelled out here and the weights are drawn under ``torch.manual_seed(seed)``.
MoE (2 experts, top-1) and a 1-layer vision tower are mandatory in transformers 5.23.0 (it refuses a config
without them).
transformers is imported only when a model is built (optional extra ``explainer[hf]``).
"""

from __future__ import annotations

import torch

__all__ = ["TEXT_CONFIG", "VISION_CONFIG", "tiny_hf_config", "tiny_hf_model", "REFERENCE_PROMPT"]

TEXT_CONFIG = dict(
    model_type="diffusion_gemma_text", vocab_size=128, hidden_size=32, intermediate_size=32,
    num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"], num_attention_heads=2,
    num_key_value_heads=1, head_dim=16, global_head_dim=16, num_global_key_value_heads=1,
    sliding_window=64, max_position_embeddings=512, num_experts=2, top_k_experts=1,
    moe_intermediate_size=8, pad_token_id=0, bos_token_id=1, eos_token_id=2)
VISION_CONFIG = dict(model_type="gemma4_vision", hidden_size=16, intermediate_size=16, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=1, patch_size=5)
REFERENCE_PROMPT = [1, 10, 11, 12, 13]   # the prompt of the recorded conformance vectors (tests/test_hf_conformance.py)


def _transformers():
    try:
        import transformers
    except ImportError as exc:   # pragma: no cover - depends on the environment
        raise ImportError("explainer.model.hf_tiny needs transformers==5.23.0: pip install 'explainer[hf]'") from exc
    return transformers


def tiny_hf_config(canvas_length: int = 8):
    """``DiffusionGemmaConfig``: vocab 128, hidden 32, 2 layers, canvas ``canvas_length``."""
    transformers = _transformers()
    return transformers.DiffusionGemmaConfig(text_config=dict(TEXT_CONFIG), vision_config=dict(VISION_CONFIG),
                                             canvas_length=canvas_length, image_token_id=127,
                                             boi_token_id=126, eoi_token_id=125)


def tiny_hf_model(seed: int = 0, canvas_length: int = 8):
    """Random-weight ``DiffusionGemmaForBlockDiffusion`` in eval mode; ``torch.manual_seed(seed)`` right
    before construction, so seed 0 is the model whose seeded outputs transformers 5.23.0 recorded
    (``tests/test_hf_conformance.py`` keeps them)."""
    transformers = _transformers()
    config = tiny_hf_config(canvas_length)
    torch.manual_seed(seed)
    return transformers.DiffusionGemmaForBlockDiffusion(config).eval()
