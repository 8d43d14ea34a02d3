"""The canvas sampler's stepper: frames from ``render_canvas.canvas_frames`` in a ``widgets.Stepper``."""

from __future__ import annotations

from typing import Mapping, Sequence

from explainer.render_canvas import canvas_frames
from explainer.sampler import StepRecorder
from explainer.widgets import Stepper

__all__ = ["canvas_stepper"]


def canvas_stepper(recorder: StepRecorder, prompt, *, vocab: Sequence[str] | None = None,
                   config: Mapping | None = None, row: int = 0, commit_frames: bool = True,
                   interval_ms: int = 900) -> Stepper:
    """Play + slider over every denoising step (and commit) of every canvas of one recorded generation."""
    frames = canvas_frames(recorder, prompt, vocab=vocab, config=config, row=row, commit_frames=commit_frames)
    return Stepper(frames, description="frame", interval_ms=interval_ms)
