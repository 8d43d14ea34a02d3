"""The toy's per-stage KV cache: one growing K/V tensor per local layer, truncated to roll back.

vLLM keeps paged KV blocks and rolls back by moving ``num_computed_tokens``; at toy scale one tensor per
layer and request is enough, and ``truncate`` is the rollback a denoise step needs.
"""

from __future__ import annotations

import torch

from explainer.errors import UsageError


class KVCache:
    """Per stage, per request (or batch of equal-length rows): K/V of the local layers.

    ``keys[i]`` / ``values[i]``: [B, heads, T, head_dim] for the i-th layer this stage owns.
    """

    def __init__(self, num_layers: int):
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers

    @property
    def length(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[2]

    def append(self, i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append this call's K/V [B, heads, T_new, hd] to local layer i; return all K/V [B, heads, T, hd]."""
        if self.keys[i] is not None:
            k = torch.cat([self.keys[i], k], dim=2)
            v = torch.cat([self.values[i], v], dim=2)
        self.keys[i], self.values[i] = k, v
        return k, v

    def truncate(self, n: int) -> None:
        """Keep the first n positions (roll back rejected / denoise tokens)."""
        if not 0 <= n <= self.length:
            raise UsageError(f"cannot truncate a KV cache of length {self.length} to {n}; accepted: 0..{self.length}")
        for i in range(len(self.keys)):
            if self.keys[i] is not None:
                self.keys[i] = self.keys[i][:, :, :n]
                self.values[i] = self.values[i][:, :, :n]
        if n == 0:
            self.keys = [None] * len(self.keys)
            self.values = [None] * len(self.values)
