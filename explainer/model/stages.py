"""What a pipeline-parallel stage of the model needs: the tensors it hands on, its share of the layers, and a
placeholder for the layers other stages own.

* ``IntermediateTensors``: vLLM ``vllm/sequence.py``; a non-last stage returns them, the next one receives them.
* ``get_pp_indices``: vLLM ``vllm/distributed/utils.py``, the even split of the layers over the stages.
* ``PPMissingLayer``: vLLM ``model_executor/models/utils.py``, so parameter names stay global per stage.
"""

from __future__ import annotations

import torch
from torch import nn

from explainer.errors import UsageError


class IntermediateTensors:
    """vLLM's name: the named tensors a non-last PP stage hands to the next one."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        self.tensors = dict(tensors)

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.tensors[key]

    def __setitem__(self, key: str, value: torch.Tensor) -> None:
        self.tensors[key] = value

    def __len__(self) -> int:
        return len(self.tensors)

    def keys(self):
        return self.tensors.keys()

    def items(self):
        return self.tensors.items()

    def __eq__(self, other) -> bool:
        return (isinstance(other, IntermediateTensors) and self.tensors.keys() == other.tensors.keys()
                and all(torch.equal(v, other.tensors[k]) for k, v in self.tensors.items()))

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}: {tuple(v.shape)} {v.dtype}" for k, v in self.tensors.items())
        return f"IntermediateTensors({shapes})"


def get_pp_indices(num_hidden_layers: int, pp_rank: int, pp_size: int) -> tuple[int, int]:
    """vLLM's even split; leftover layers go to the stages just before the last one."""
    if not 1 <= pp_size <= num_hidden_layers:
        raise UsageError(f"pp size {pp_size} is not usable with {num_hidden_layers} layers; accepted: 1..{num_hidden_layers}")
    if not 0 <= pp_rank < pp_size:
        raise UsageError(f"pp rank {pp_rank} is out of range; accepted: 0..{pp_size - 1}")
    per = num_hidden_layers // pp_size
    partitions = [per] * pp_size
    for i in range(2, num_hidden_layers % pp_size + 2):
        partitions[-i] += 1
    start = sum(partitions[:pp_rank])
    return start, start + partitions[pp_rank]


class PPMissingLayer(nn.Identity):
    """Placeholder for a layer another PP stage owns (vLLM's name)."""
