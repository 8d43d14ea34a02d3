"""``TinyConfig``: the shape of the tiny backbone (the text part of HF ``DiffusionGemmaConfig``), stored in the
checkpoint's metadata JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class TinyConfig:
    vocab_size: int = 40
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    head_dim: int = 16
    canvas_length: int = 8
    final_logit_softcapping: float = 30.0
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    pad_token_id: int = 0
    eos_token_id: int = 1

    def to_dict(self) -> dict:
        return asdict(self)
