"""The canvas sampler's stepper: frames from ``render.canvas_story.canvas_story`` in a ``stepper.Stepper``.

Each frame carries its "frame k of N · what happens" caption; "first renoise" and "commit k" are
jump-to buttons (browser-side, so they work in a static export). The frame box is as tall as the tallest frame.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from explainer.render.canvas_story import canvas_story
from explainer.sampler import StepRecorder
from explainer.widgets.stepper import Stepper

__all__ = ["canvas_stepper"]


def canvas_stepper(recorder: StepRecorder, prompt, *, vocab: Sequence[str] | None = None,
                   config: Mapping | None = None, row: int = 0, commit_frames: bool = True,
                   interval_ms: int = 900) -> Stepper:
    """Play + slider over every denoising step (and commit) of every canvas of one recorded generation."""
    frames, captions, marks = canvas_story(recorder, prompt, vocab=vocab, config=config, row=row,
                                           commit_frames=commit_frames)
    return Stepper(frames, description="frame", interval_ms=interval_ms, captions=captions, bookmarks=marks)
