"""The shipped checkpoint (package data ``explainer/checkpoints/``, no network): its metadata, its weights as
one PP stage, and the weight initialisation the training script starts from.
"""

from __future__ import annotations

import json
import math
from importlib import resources

import torch
from torch import nn

from explainer.model.diffusion_gemma import DiffusionGemmaModel
from explainer.model.tiny_config import TinyConfig

CHECKPOINT_NAME = "spell_numbers"   # explainer/checkpoints/spell_numbers.{pt,json}


def metadata() -> dict:
    """The shipped checkpoint's metadata JSON (config, task, sizes, accuracy, generation config)."""
    path = resources.files("explainer") / "checkpoints" / f"{CHECKPOINT_NAME}.json"
    return json.loads(path.read_text())


def load_state_dict() -> dict[str, torch.Tensor]:
    path = resources.files("explainer") / "checkpoints" / f"{CHECKPOINT_NAME}.pt"
    with resources.as_file(path) as p:
        return torch.load(p, map_location="cpu", weights_only=True)


def load_pretrained(start_layer: int = 0, end_layer: int | None = None) -> DiffusionGemmaModel:
    """The shipped checkpoint (package data, no network) as one PP stage, in eval mode."""
    config = TinyConfig(**metadata()["config"])
    model = DiffusionGemmaModel(config, start_layer, end_layer)
    state = load_state_dict()
    wanted = model.state_dict().keys()
    model.load_state_dict({k: v for k, v in state.items() if k in wanted}, strict=True)
    return model.eval()


def num_parameters(model: nn.Module) -> int:
    """Number of parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())


def init_weights(model: DiffusionGemmaModel, std: float = 0.02) -> None:
    """Normal(0, std) linear weights, embedding std 1/sqrt(H) (× sqrt(H) at input keeps unit scale)."""
    for name, p in model.named_parameters():
        if name.endswith("norm.weight") or name.endswith("_norm.weight"):
            nn.init.ones_(p)
        elif name == "embed_tokens.weight":
            nn.init.normal_(p, std=1.0 / math.sqrt(model.config.hidden_size))
        else:
            nn.init.normal_(p, std=std)
