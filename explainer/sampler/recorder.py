"""What one ``generate`` call did, step by step and canvas by canvas (the notebooks' canvas stepper reads it)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["StepRecord", "CanvasRecord", "StepRecorder"]


@dataclass
class StepRecord:
    canvas_index: int
    cur_step: int                    # N..1
    temperature: float
    input_canvas: torch.Tensor       # [B, L] canvas the decoder saw
    candidate: torch.Tensor
    accepted: torch.Tensor
    entropy: torch.Tensor
    argmax: torch.Tensor             # after freezing finished rows
    canvas: torch.Tensor             # next input canvas, after freezing finished rows
    stable: torch.Tensor | None      # [B] bool (None: adaptive stopping off)
    confident: torch.Tensor | None
    finished: torch.Tensor           # [B] bool, finished denoising after this step


@dataclass
class CanvasRecord:
    canvas_index: int
    steps: int                       # decoder forwards run for this canvas
    argmax: torch.Tensor             # [B, L] committed draft before EOS padding
    committed: torch.Tensor          # [B, L] tokens appended to the sequence (after padding)
    finished: torch.Tensor           # [B] rows finished (EOS / max length) after this canvas


@dataclass
class StepRecorder:
    """Collects every step and every committed canvas of one ``generate`` call."""

    steps: list[StepRecord] = field(default_factory=list)
    canvases: list[CanvasRecord] = field(default_factory=list)

    def on_step(self, record: StepRecord) -> None:
        self.steps.append(record)

    def on_canvas(self, record: CanvasRecord) -> None:
        self.canvases.append(record)
