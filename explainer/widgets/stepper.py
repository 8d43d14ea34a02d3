"""Thin ipywidgets apps over precomputed frames; no logic of their own.

A ``Stepper`` shows one HTML frame at a time. The frames are rendered up front by
``explainer.render`` from a real run, put in a ``Stack`` and driven by a ``Play`` + ``IntSlider``
through ``jslink`` — so the stepper also works in a static nbconvert HTML export with no kernel.
With a kernel, a Python observer mirrors the slider into ``stack.selected_index`` (what headless
tests assert) and into ``current`` (the frame being shown).

Reading aids, all browser-side so they survive a static export:

* one row of controls (▶/⏸, the slider, the "jump to" buttons) right above the frame, so a laptop
  screen shows the controls, the frame's caption and what changed together; no ■ button (ipywidgets'
  stop rewinds to frame 1, which is not what the symbol promises): ▶ turns into ⏸ while playing;
* every frame is shown under a caption ``frame k of N · what happens``;
* the frame box is as tall as the stepper's tallest frame, at every page width, so the page neither
  jumps while playing nor keeps a fixed gap sized for some other stepper: the box is a one-cell grid
  holding the ``Stack`` and, hidden (``visibility: hidden``, so it still takes space), the tallest
  frames again (the same ``HTML`` models, so the notebook stores them once);
* ``bookmarks`` ({label: frame}) become one-click "jump to" buttons: a ``ToggleButtons`` with one
  option per frame whose ``index`` is jslinked to the slider's ``value`` (equal values, so a plain
  ``jslink`` works); a scoped style shows only the bookmarked options' buttons.
"""

from __future__ import annotations

import hashlib
import re
from html import escape
from typing import Mapping, Sequence

import ipywidgets as W

__all__ = ["Stepper", "fitted_stack", "caption_html", "KERNEL_NOTE", "KERNEL_CLASS", "kernel_note"]

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


def caption_html(k: int, n: int, text: str) -> str:
    """``frame k of N · what happens`` (1-based for the reader; ``data-frame`` is the 0-based slider value)."""
    return (f'<div class="xp-caption" data-frame="{k}" style="font:600 13px/1.35 system-ui,sans-serif;'
            f'margin:0 0 4px;padding:3px 6px;background:#f2f2f2;border-left:4px solid #0072B2">'
            f'frame {k + 1} of {n}' + (f" · {escape(text)}" if text else "") + "</div>")


SIZERS = 6          # frames kept (hidden) in the box to give it the height of the tallest one
ALL_UP_TO = 16      # a stepper with this many frames or fewer keeps them all: exact at every width


def frame_weight(html: str) -> float:
    """A rough height of a frame, to pick the tallest ones without a browser: its pictures' heights (px),
    its block elements and its text (a wrapped line per ~70 characters)."""
    svg = 0.0
    for tag in re.findall(r"<svg\b[^>]*>", html):      # graphviz's height="..pt", or fit_svg's viewBox height
        m = re.search(r'\bheight="([\d.]+)pt"', tag) or re.search(r'viewBox="[-\d.]+ [-\d.]+ [\d.]+ ([\d.]+)"', tag)
        svg += float(m.group(1)) * 4 / 3 if m else 0.0
    blocks = len(re.findall(r"<(?:tr|div|br|li|h\d|p|table)\b", html))
    text = len(re.sub(r"<style.*?</style>|<[^>]+>", "", html, flags=re.S))
    return svg + 18 * blocks + 18 * text / 70


def tallest(frames: Sequence[str], k: int = SIZERS) -> list[int]:
    """Indices of the ``k`` frames most likely to be the tallest at some page width (by ``frame_weight``,
    and by text length alone, which decides the height where lines wrap)."""
    by_weight = sorted(range(len(frames)), key=lambda i: -frame_weight(frames[i]))
    by_text = sorted(range(len(frames)), key=lambda i: -len(re.sub(r"<[^>]+>", "", frames[i])))
    picked: list[int] = []
    for i in [x for pair in zip(by_weight, by_text) for x in pair]:
        if i not in picked:
            picked.append(i)
    return sorted(picked[:k])


def fitted_stack(pages: Sequence[str], start: int = 0) -> tuple[W.Stack, W.GridBox]:
    """(the ``Stack`` of ``pages``, the box to display): a one-cell grid holding the Stack and, hidden but
    taking space, the ``tallest`` pages again (the same models), so the box is as tall as the tallest page."""
    cell = "1 / 1 / 2 / 2"                               # every page in the same grid cell
    shown = [W.HTML(f, layout=W.Layout(grid_area=cell)) for f in pages]
    stack = W.Stack(shown, selected_index=start, layout=W.Layout(grid_area=cell, min_width="0"))
    keep = range(len(pages)) if len(pages) <= ALL_UP_TO else tallest(pages)
    sizer = W.GridBox([shown[k] for k in keep], layout=W.Layout(
        grid_area=cell, visibility="hidden", grid_template_columns="minmax(0, 1fr)", min_width="0"))
    sizer.add_class("xp-sizer")
    box = W.GridBox([stack, sizer], layout=W.Layout(grid_template_columns="minmax(0, 1fr)"))
    box.add_class("xp-frames")
    return stack, box


class Stepper:
    """Play + slider over a list of HTML frames (one frame per recorded event or step)."""

    def __init__(self, frames: Sequence[str], *, description: str = "step", interval_ms: int = 700,
                 header: str | None = None, start: int = 0, captions: Sequence[str] | None = None,
                 bookmarks: Mapping[str, int] | None = None):
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
        # a class name from the frames themselves: unique per stepper across notebooks open side by side in
        # JupyterLab (one document, so one page's scoped style must not reach another's), stable across runs
        uid = "xp-stepper-" + hashlib.sha1("\0".join(self.shown).encode()).hexdigest()[:12]
        self.play = W.Play(value=start, min=0, max=last, step=1, interval=interval_ms, show_repeat=False,
                           description="play", layout=W.Layout(width="auto"))
        # no numeric readout: it counts from 0 while the caption says "frame k of N" from 1
        self.slider = W.IntSlider(value=start, min=0, max=last, step=1, description=description,
                                  readout=False, continuous_update=True,
                                  layout=W.Layout(width="auto", flex="1 1 200px", min_width="160px", max_width="480px"))
        self.stack, box = fitted_stack(self.shown, start)
        # ■ (ipywidgets rewinds to frame 1 on it) is hidden: ▶ becomes ⏸ while playing. In JupyterLab, an
        # unrun notebook marks every widget part with a broken-link icon: one, on the stepper itself, is enough.
        styles = [f".{uid} .widget-play > button:nth-child(2){{display:none}}",
                  f".{uid} .jupyter-widgets-disconnected::before{{content:none;display:none}}"]
        # browser-side links: they keep working in a static HTML export, where Python observers are dead
        links = [W.jslink((self.play, "value"), (self.slider, "value")),
                 W.jslink((self.slider, "value"), (self.stack, "selected_index"))]
        self.bookmarks = dict(bookmarks or {})
        self.jump = None
        controls = [self.play, self.slider]
        if self.bookmarks:
            labels = {k: label for label, k in self.bookmarks.items()}
            options = [(labels.get(k, f"{k}"), k) for k in range(n)]
            self.jump = W.ToggleButtons(options=options, index=start,           # no label: one row less on a laptop
                                        style={"button_width": "auto"}, tooltips=[labels.get(k, "") for k in range(n)],
                                        layout=W.Layout(width="auto"))
            self.jump.add_class("xp-jump")
            links.append(W.jslink((self.jump, "index"), (self.slider, "value")))
            self.jump.observe(self._on_jump, names="index")
            shown = ",".join(f".{uid} .xp-jump .widget-toggle-button:nth-of-type({k + 1})" for k in sorted(labels))
            styles.append(f".{uid} .xp-jump .widget-toggle-button{{display:none}} {shown}{{display:inline-block}}")
            controls.append(self.jump)
        row = W.HBox(controls, layout=W.Layout(flex_flow="row wrap", align_items="center"))
        row.add_class("xp-controls")
        self.links = tuple(links)
        self.slider.observe(self._on_value, names="value")
        parts = ([W.HTML(header)] if header else []) + [row, W.HTML("<style>" + " ".join(styles) + "</style>"), box]
        self.widget = W.VBox(parts)
        self.widget.add_class("xp-stepper").add_class(uid)

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
