"""Thin ipywidgets apps over precomputed frames; no logic of their own.

A ``Stepper`` shows one HTML frame at a time. The frames are rendered up front by
``explainer.render`` from a real run, put in a ``Stack`` and driven by a ``Play`` + ``IntSlider``
through ``jslink`` — so the stepper also works in a static nbconvert HTML export with no kernel.
With a kernel, a Python observer mirrors the slider into ``stack.selected_index`` (what headless
tests assert) and into ``current`` (the frame being shown).
"""

from __future__ import annotations

from typing import Sequence

import ipywidgets as W


class Stepper:
    """Play + slider over a list of HTML frames (one frame per recorded event or step)."""

    def __init__(self, frames: Sequence[str], *, description: str = "step", interval_ms: int = 700,
                 header: str | None = None, start: int = 0):
        if not frames:
            raise ValueError("Stepper needs at least one frame (got 0)")
        if not 0 <= start < len(frames):
            raise ValueError(f"start={start} is outside the frames' range 0..{len(frames) - 1}")
        self.frames = list(frames)
        last = len(self.frames) - 1
        self.play = W.Play(value=start, min=0, max=last, step=1, interval=interval_ms,
                           description="play", layout=W.Layout(width="auto"))
        self.slider = W.IntSlider(value=start, min=0, max=last, step=1, description=description,
                                  continuous_update=True, layout=W.Layout(width="520px"))
        self.stack = W.Stack([W.HTML(f) for f in self.frames], selected_index=start)
        # browser-side links: they keep working in a static HTML export, where Python observers are dead
        self.links = (W.jslink((self.play, "value"), (self.slider, "value")),
                      W.jslink((self.slider, "value"), (self.stack, "selected_index")))
        self.slider.observe(self._on_value, names="value")
        parts = [W.HTML(header)] if header else []
        self.widget = W.VBox(parts + [W.HBox([self.play, self.slider]), self.stack])

    def _on_value(self, change) -> None:
        self.stack.selected_index = change["new"]

    @property
    def current(self) -> str:
        """HTML of the frame on screen."""
        return self.frames[self.stack.selected_index]

    def step(self, delta: int = 1) -> str:
        """Move the slider by ``delta`` (clamped) and return the frame now shown."""
        self.slider.value = max(self.slider.min, min(self.slider.max, self.slider.value + delta))
        return self.current

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)
