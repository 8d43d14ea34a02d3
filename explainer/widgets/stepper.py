"""Thin ipywidgets apps over precomputed frames; no logic of their own.

A ``Stepper`` shows one HTML frame at a time. The frames are rendered up front by
``explainer.render`` from a real run, put in a ``Stack`` and driven by a ``Play`` + ``IntSlider``
through ``jslink`` — so the stepper also works in a static nbconvert HTML export with no kernel.
With a kernel, a Python observer mirrors the slider into ``stack.selected_index`` (what headless
tests assert) and into ``current`` (the frame being shown).

Reading aids, all browser-side so they survive a static export:

* every frame is shown under a caption ``frame k of N · what happens`` and inside a box of fixed
  height (``height``), so the page does not jump while playing;
* ``bookmarks`` ({label: frame}) become one-click "jump to" buttons: a ``ToggleButtons`` with one
  option per frame whose ``index`` is jslinked to the slider's ``value`` (equal values, so a plain
  ``jslink`` works); a scoped style shows only the bookmarked options' buttons.
"""

from __future__ import annotations

import itertools
from html import escape
from typing import Mapping, Sequence

import ipywidgets as W

__all__ = ["Stepper", "caption_html", "KERNEL_NOTE", "KERNEL_CLASS", "kernel_note"]

KERNEL_NOTE = ("needs a running kernel: in a static page these controls do nothing (the picture below is the "
               "stored run and still steps)")
# Controls that start a new run carry this class. The docs site's stylesheet (docs/_static/explainer.css) greys
# them out and makes them unclickable, and shows the "disabled on this page" line of ``kernel_note``;
# JupyterLab has no such rule, so there the controls work and the first line shows.
KERNEL_CLASS = "xp-needs-kernel"
STATIC_NOTE = ("Disabled on this page: Run needs a live kernel. Open this notebook in JupyterLab (make lab) to use "
               "it; the picture below is the stored run and still steps.")


def kernel_note(what: str = "▶ Run") -> W.HTML:
    """The line under kernel-needing controls: what they need in a notebook, and why they are off on the site."""
    return W.HTML('<div style="font:12px system-ui,sans-serif;color:#555">'
                  f'<span class="xp-lab-only">{escape(what)} {escape(KERNEL_NOTE)}.</span>'
                  f'<span class="xp-static-only" style="display:none">⊘ {escape(STATIC_NOTE)}</span></div>')
_ids = itertools.count()


def caption_html(k: int, n: int, text: str) -> str:
    """``frame k of N · what happens`` (1-based for the reader; ``data-frame`` is the 0-based slider value)."""
    return (f'<div class="xp-caption" data-frame="{k}" style="font:600 13px/1.35 system-ui,sans-serif;'
            f'margin:0 0 4px;padding:3px 6px;background:#f2f2f2;border-left:4px solid #0072B2">'
            f'frame {k + 1} of {n}' + (f" · {escape(text)}" if text else "") + "</div>")


class Stepper:
    """Play + slider over a list of HTML frames (one frame per recorded event or step)."""

    def __init__(self, frames: Sequence[str], *, description: str = "step", interval_ms: int = 700,
                 header: str | None = None, start: int = 0, captions: Sequence[str] | None = None,
                 bookmarks: Mapping[str, int] | None = None, height: int | None = None,
                 narrow_height: int | None = None):
        if not frames:
            raise ValueError("Stepper needs at least one frame (got 0)")
        if not 0 <= start < len(frames):
            raise ValueError(f"start={start} is outside the frames' range 0..{len(frames) - 1}")
        if captions is not None and len(captions) != len(frames):
            raise ValueError(f"captions: {len(captions)} given for {len(frames)} frames")
        for label, k in (bookmarks or {}).items():
            if not 0 <= k < len(frames):
                raise ValueError(f"bookmark {label!r} -> frame {k} is outside 0..{len(frames) - 1}")
        self.frames = list(frames)
        n, last = len(self.frames), len(self.frames) - 1
        self.captions = list(captions) if captions is not None else [""] * n
        self.shown = [caption_html(k, n, self.captions[k]) + f for k, f in enumerate(self.frames)]
        self.play = W.Play(value=start, min=0, max=last, step=1, interval=interval_ms,
                           description="play", layout=W.Layout(width="auto"))
        # no numeric readout: it counts from 0 while the caption says "frame k of N" from 1
        self.slider = W.IntSlider(value=start, min=0, max=last, step=1, description=description,
                                  readout=False, continuous_update=True, layout=W.Layout(width="min(520px, 70vw)"))
        uid = f"xp-stepper-{next(_ids)}"
        box = W.Layout(height=f"{height}px", overflow="auto") if height else W.Layout()
        self.stack = W.Stack([W.HTML(f) for f in self.shown], selected_index=start, layout=box)
        self.stack.add_class(f"{uid}-frames")
        styles = []
        if height and narrow_height:          # a narrow page wraps the columns: a taller fixed box there
            styles.append(f"@media (max-width: 900px) {{ .{uid}-frames {{ height: {narrow_height}px !important }} }}")
        # browser-side links: they keep working in a static HTML export, where Python observers are dead
        links = [W.jslink((self.play, "value"), (self.slider, "value")),
                 W.jslink((self.slider, "value"), (self.stack, "selected_index"))]
        self.bookmarks = dict(bookmarks or {})
        self.jump = None
        parts = [W.HTML(header)] if header else []
        parts.append(W.HBox([self.play, self.slider]))
        if self.bookmarks:
            labels = {k: label for label, k in self.bookmarks.items()}
            options = [(labels.get(k, f"{k}"), k) for k in range(n)]
            self.jump = W.ToggleButtons(options=options, index=start, description="jump to",
                                        style={"button_width": "auto"}, tooltips=[labels.get(k, "") for k in range(n)])
            self.jump.add_class("xp-jump").add_class(f"{uid}-jump")
            links.append(W.jslink((self.jump, "index"), (self.slider, "value")))
            self.jump.observe(self._on_jump, names="index")
            shown = ",".join(f".{uid}-jump .widget-toggle-button:nth-of-type({k + 1})" for k in sorted(labels))
            styles.append(f".{uid}-jump .widget-toggle-button{{display:none}} {shown}{{display:inline-block}}")
            parts.append(self.jump)
        if styles:
            parts.append(W.HTML("<style>" + " ".join(styles) + "</style>"))
        self.links = tuple(links)
        self.slider.observe(self._on_value, names="value")
        self.widget = W.VBox(parts + [self.stack])

    def _on_value(self, change) -> None:
        self.stack.selected_index = change["new"]
        if self.jump is not None and self.jump.index != change["new"]:
            self.jump.index = change["new"]

    def _on_jump(self, change) -> None:
        if change["new"] is not None and self.slider.value != change["new"]:
            self.slider.value = change["new"]

    @property
    def index(self) -> int:
        return self.stack.selected_index

    @property
    def current(self) -> str:
        """HTML of the frame on screen (without its caption)."""
        return self.frames[self.stack.selected_index]

    @property
    def caption(self) -> str:
        """``frame k of N · what happens`` of the frame on screen, as plain text."""
        k = self.stack.selected_index
        return f"frame {k + 1} of {len(self.frames)}" + (f" · {self.captions[k]}" if self.captions[k] else "")

    def step(self, delta: int = 1) -> str:
        """Move the slider by ``delta`` (clamped) and return the frame now shown."""
        self.slider.value = max(self.slider.min, min(self.slider.max, self.slider.value + delta))
        return self.current

    def jump_to(self, label: str) -> str:
        """Press the bookmark button ``label`` (what a click does in the browser) and return the frame."""
        if label not in self.bookmarks:
            raise ValueError(f"bookmark {label!r}: accepted {', '.join(map(repr, self.bookmarks)) or 'none'}")
        self.jump.index = self.bookmarks[label]
        return self.current

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)
