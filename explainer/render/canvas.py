"""Canvas sampler -> HTML strings: one frame per denoising step (and per commit) of a recorded generation
(``canvas_story`` strings the frames of a whole generation together).

Pure functions over ``explainer.sampler.StepRecorder`` records; no widgets, no model. Every frame is
self-contained (its own scoped ``<style>`` and legend), so a ``Stack`` of frames also works in a static
HTML export. Canvas and step numbers shown (and used in element ids) are 1-based; ``cur_step`` counts
down from ``max_denoising_steps`` as in HF.

Cell states (CSS class on each ``.xp-cell``):
    xp-accepted   next canvas keeps the sampled candidate (entropy-bound acceptance)
    xp-renoised   next canvas gets a fresh uniform random token
    xp-committed  the argmax draft a canvas commits (last step, and the commit frame)
    xp-draft      the argmax draft on an earlier step (staged, not committed)
    xp-input      the canvas the decoder saw;  xp-prefix: prompt / committed canvases
"""

from __future__ import annotations

import math
from html import escape
from typing import Mapping, Sequence

import torch

from explainer.render.rules import ACCEPT, RENOISE, accept_rule_html, entropy_text, stop_rule_html
from explainer.sampler import CanvasRecord, StepRecord

__all__ = ["Glyphs", "CSS", "BADGES", "DEFAULTS", "cell", "legend", "render_step", "render_commit"]

# a text badge on every state that colour alone would carry (colour-blind and greyscale safe)
BADGES = {"accepted": ACCEPT, "renoised": RENOISE, "committed": "⇓"}

DEFAULTS = dict(max_denoising_steps=48, entropy_bound=0.1, t_min=0.4, t_max=0.8, stability_threshold=1,
                confidence_threshold=0.005, eos_token_id=None, pad_token_id=None)

CSS = """<style>
.xp-frame{font:13px/1.35 system-ui,sans-serif;color:#222;max-width:760px}
.xp-frame .xp-head{font-weight:600;margin:2px 0 6px}
.xp-frame .xp-cell{display:inline-block;min-width:1.6em;padding:2px 3px;margin:1px;text-align:center;
 font:14px/1.2 ui-monospace,monospace;border:1px solid #bbb;border-radius:3px;background:#fff;white-space:pre}
.xp-frame .xp-cell sup{font:700 9px/1 system-ui,sans-serif;margin-left:1px}
.xp-frame .xp-input{background:#f4f4f4;color:#555}
.xp-frame .xp-candidate{background:#fff;color:#555;font-style:italic}
.xp-frame .xp-accepted{background:#d3efe5;border:2px solid #009E73;color:#00513b}
.xp-frame .xp-renoised{background:#fbe3d2;border:2px dashed #D55E00;color:#7a3600}
.xp-frame .xp-draft{background:#fff;border:1px dotted #555;color:#444}
.xp-frame .xp-committed{background:#d0e6f5;border:3px double #0072B2;color:#003a5c;font-weight:700}
.xp-frame .xp-prefix{background:#f4e4ee;border-color:#CC79A7;color:#5b2046}
.xp-frame .xp-pad{color:#aaa}
.xp-frame .xp-block{display:inline-block;margin-right:8px;padding:1px;border-bottom:2px solid #CC79A7}
.xp-frame table.xp-grid{border-collapse:collapse;margin:4px 0}
.xp-frame table.xp-grid th{text-align:right;font-weight:400;color:#555;padding:0 8px 0 0;white-space:nowrap}
.xp-frame table.xp-grid td{padding:0;text-align:center}
.xp-frame .xp-pos{font-size:11px;color:#888}
.xp-frame .xp-bar{width:2.2em;height:6px;background:#eee;margin:1px auto;border-radius:2px}
.xp-frame .xp-bar>div{height:6px;background:#0072B2;border-radius:2px}
.xp-frame .xp-h{font-size:10px;color:#666}
.xp-frame .xp-stop{margin:6px 0;padding:4px 6px;background:#fafafa;border-left:3px solid #999}
.xp-frame .xp-rule{margin:4px 0;padding:3px 6px;background:#fafafa;border-left:3px solid #56B4E9;font-size:12px}
.xp-frame table.xp-sorted{border-collapse:collapse;margin:3px 0}
.xp-frame table.xp-sorted td{border:1px solid #ddd;padding:1px 4px;font:11px/1.25 ui-monospace,monospace;
 text-align:center}
.xp-frame .xp-acc{color:#00513b}.xp-frame .xp-ren{color:#7a3600}
.xp-frame .xp-yes{color:#00513b;font-weight:600}.xp-frame .xp-no{color:#7a3600;font-weight:600}
.xp-frame .xp-legend{font-size:12px;color:#555;margin-top:6px}
.xp-frame .xp-legend .xp-cell{font-size:11px;min-width:1.2em}
.xp-frame .xp-legend .xp-item{white-space:nowrap;margin-right:6px}
.xp-frame table.xp-summary{border-collapse:collapse}
.xp-frame table.xp-summary td,.xp-frame table.xp-summary th{border:1px solid #ddd;padding:2px 6px;text-align:left}
</style>"""


def _ids(value) -> set[int]:
    if value is None:
        return set()
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    return {int(value)} if isinstance(value, int) else {int(v) for v in value}


class Glyphs:
    """Token id -> short display text (unescaped): the vocabulary's string, ``␣`` for a space,
    ``·`` for pad and ``⏎`` for end of text; the id itself when no vocabulary is given."""

    def __init__(self, vocab: Sequence[str] | None = None, pad_token_id=None, eos_token_id=None):
        self.vocab, self.pad, self.eos = vocab, _ids(pad_token_id), _ids(eos_token_id)

    def __call__(self, token: int) -> str:
        token = int(token)
        if token in self.eos:
            return "⏎"
        if token in self.pad:
            return "·"
        if self.vocab is None or not 0 <= token < len(self.vocab):
            return str(token)
        text = self.vocab[token]
        return "␣" if text == " " else text


def cell(glyphs: Glyphs, token: int, state: str, title: str = "") -> str:
    """One token as a cell of the grid: its glyph, its state's class and badge, its id as a tooltip."""
    extra = " xp-pad" if int(token) in glyphs.pad else ""
    tip = f"id {int(token)}" + (f" · {title}" if title else "")
    badge = f"<sup>{BADGES[state]}</sup>" if state in BADGES else ""
    return f'<span class="xp-cell xp-{state}{extra}" title="{escape(tip)}">{escape(glyphs(token))}{badge}</span>'


def legend(fid: str = "xp") -> str:
    """The one-line key every frame carries: badges and outlines named in words, never by colour."""
    items = [("prefix", "a", "prefix"),
             ("input", "a", "input"),
             ("accepted", "a", f"{ACCEPT} solid outline = accepted"),
             ("renoised", "a", f"{RENOISE} dashed outline = renoised"),
             ("draft", "a", "draft"),
             ("committed", "a", "⇓ committed")]
    swatches = " ".join(f'<span class="xp-item"><span class="xp-cell xp-{c}">{g}'
                        f'{"<sup>" + BADGES[c] + "</sup>" if c in BADGES else ""}</span> {escape(t)}</span>'
                        for c, g, t in items)
    return (f'<div class="xp-legend" id="{fid}-legend"><b>key</b> {swatches} '
            '<span class="xp-item"><span class="xp-cell">␣</span> space <span class="xp-cell xp-pad">·</span> pad '
            '<span class="xp-cell">⏎</span> end</span> <span class="xp-item">bar = entropy</span></div>')


def _prefix(glyphs: Glyphs, prompt: Sequence[int], committed: Sequence[Sequence[int]], fid: str) -> str:
    blocks = ['<span class="xp-block" title="prompt">' + "".join(cell(glyphs, t, "prefix", "prompt")
                                                                for t in prompt) + "</span>"]
    for k, canvas in enumerate(committed, 1):
        blocks.append(f'<span class="xp-block" title="canvas {k}">'
                      + "".join(cell(glyphs, t, "prefix", f"canvas {k}") for t in canvas) + "</span>")
    return (f'<div class="xp-prefix-row" id="{fid}-prefix">committed prefix ({len(prompt)} prompt token'
            f'{"s" if len(prompt) != 1 else ""} + {len(committed)} canvas{"es" if len(committed) != 1 else ""}, '
            f'encoded causally into the KV cache): {"".join(blocks)}</div>')


def _row(label: str, cells: list[str], cls: str, changed: bool = False) -> str:
    """One grid row; ``changed``: what this frame is about (``data-changed``: a jump to it must show the row)."""
    return (f'<tr class="{cls}"{" data-changed" if changed else ""}><th>{escape(label)}</th>'
            + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")


def _yes(flag: bool) -> str:
    return '<span class="xp-yes">✓ yes</span>' if flag else '<span class="xp-no">✗ no</span>'


def _stop_line(rec: StepRecord, row: int, cfg: Mapping, frozen_before: bool, last: bool) -> str:
    mean_h = float(rec.entropy[row].mean())
    n_acc, length = int(rec.accepted[row].sum()), rec.accepted.shape[-1]
    parts = [f"accepted {n_acc} of {length} (entropy bound {cfg['entropy_bound']:g})"]
    if rec.stable is None:
        parts.append("adaptive stopping off")
        verdict = "step budget used up → commit the argmax draft" if last else "continue"
    else:
        parts.append(f"stable {_yes(bool(rec.stable[row]))}")
        parts.append(f"confident {_yes(bool(rec.confident[row]))} (mean entropy {mean_h:.4f} "
                     f"{'&lt;' if mean_h < cfg['confidence_threshold'] else '≥'} {cfg['confidence_threshold']:g})")
        if frozen_before:
            verdict = "row already finished: frozen"
        elif bool(rec.finished[row]):
            verdict = "stable and confident → stop, commit the argmax draft"
        elif last:
            verdict = "step budget used up → commit the argmax draft"
        else:
            verdict = "continue"
    return f"{' · '.join(parts)} → <b>{verdict}</b>"


def render_step(rec: StepRecord, *, step_number: int, prompt: Sequence[int], committed: Sequence[Sequence[int]] = (),
                glyphs: Glyphs | None = None, config: Mapping | None = None, row: int = 0, last: bool = False,
                frozen_before: bool = False, num_canvases: int | None = None,
                previous: Sequence[Sequence[int]] = ()) -> str:
    """HTML of one denoising step for batch row ``row``: prefix, decoder input, next canvas (accepted /
    renoised), argmax draft (committed if ``last``), per-position entropy bars, temperature, the accept
    rule's and the stop rule's arithmetic (``previous``: this canvas's earlier argmax drafts), stop check."""
    cfg = {**DEFAULTS, **(config or {})}
    glyphs = glyphs or Glyphs(None, cfg["pad_token_id"], cfg["eos_token_id"])
    k, fid = rec.canvas_index + 1, f"xp-c{rec.canvas_index + 1}-s{step_number}"
    vocab = len(glyphs.vocab) if glyphs.vocab is not None else cfg.get("vocab_size")
    h_max = math.log(max(vocab, 2)) if vocab else max(float(rec.entropy.max()), 1e-9)
    length = rec.canvas.shape[-1]
    inp, cand, nxt, arg = (t[row].tolist() for t in (rec.input_canvas, rec.candidate, rec.canvas, rec.argmax))
    acc, ent = rec.accepted[row].tolist(), rec.entropy[row].tolist()
    states = ["input" if frozen_before else "accepted" if acc[i] else "renoised" for i in range(length)]
    next_cells = [cell(glyphs, nxt[i], states[i], f"candidate {glyphs(cand[i])!r}") for i in range(length)]
    draft_state = "committed" if last else "draft"
    bars = [f'<div class="xp-bar"><div style="width:{min(100.0, 100 * h / h_max):.0f}%"></div></div>'
            f'<span class="xp-h">{entropy_text(h, 2, compact=True)}</span>' for h in ent]
    grid = "".join([
        '<tr><th></th>' + "".join(f'<td class="xp-pos">{i}</td>' for i in range(length)) + "</tr>",
        _row("decoder input", [cell(glyphs, t, "input") for t in inp], "xp-row-input"),
        _row("candidate (drawn at T)", [cell(glyphs, t, "candidate") for t in cand], "xp-row-candidate"),
        _row("next canvas", next_cells, "xp-row-next", changed=not frozen_before),
        _row("argmax draft" + (" → committed" if last else ""), [cell(glyphs, t, draft_state) for t in arg],
             "xp-row-argmax"),
        _row("entropy", bars, "xp-row-entropy")])
    of = f" of {num_canvases}" if num_canvases else ""
    head = (f'canvas {k}{of} · step {step_number} (cur_step {rec.cur_step} of {cfg["max_denoising_steps"]}, '
            f'counting down) · temperature <span id="{fid}-temperature">T = {rec.temperature:.4f}</span>')
    return (f'{CSS}<div class="xp-frame" id="{fid}" data-kind="step" data-canvas="{k}" data-step="{step_number}">'
            f'<div class="xp-head" id="{fid}-head">{head}</div>{_prefix(glyphs, prompt, committed, fid)}'
            f'<table class="xp-grid" id="{fid}-canvas">{grid}</table>'
            f'<div class="xp-stop" id="{fid}-stop" data-changed>{_stop_line(rec, row, cfg, frozen_before, last)}</div>'
            f'{_rules(rec, row, cfg, glyphs, fid, frozen_before, previous)}{legend(fid)}</div>')


def _rules(rec: StepRecord, row: int, cfg: Mapping, glyphs: Glyphs, fid: str, frozen_before: bool,
           previous: Sequence[Sequence[int]]) -> str:
    if frozen_before:
        return ""
    out = accept_rule_html(rec.entropy[row], rec.accepted[row], cfg["entropy_bound"], fid)
    if rec.stable is not None:
        out += stop_rule_html(draft=rec.argmax[row].tolist(), previous=previous, entropy=rec.entropy[row],
                              stable=bool(rec.stable[row]), confident=bool(rec.confident[row]), cfg=cfg,
                              glyph=glyphs, fid=fid)
    return out


def render_commit(canvas: CanvasRecord, *, prompt: Sequence[int], committed: Sequence[Sequence[int]] = (),
                  glyphs: Glyphs | None = None, config: Mapping | None = None, row: int = 0,
                  last_canvas: bool = False) -> str:
    """HTML of a canvas commit: the argmax draft, the tokens appended (pad after EOS) and what happens next."""
    cfg = {**DEFAULTS, **(config or {})}
    glyphs = glyphs or Glyphs(None, cfg["pad_token_id"], cfg["eos_token_id"])
    k, fid = canvas.canvas_index + 1, f"xp-c{canvas.canvas_index + 1}-commit"
    draft, appended = canvas.argmax[row].tolist(), canvas.committed[row].tolist()
    grid = "".join([
        '<tr><th></th>' + "".join(f'<td class="xp-pos">{i}</td>' for i in range(len(draft))) + "</tr>",
        _row("argmax draft", [cell(glyphs, t, "committed") for t in draft], "xp-row-argmax"),
        _row("appended", [cell(glyphs, t, "prefix") for t in appended], "xp-row-appended", changed=True)])
    if bool(canvas.finished[row]):
        note = "end of text (or max length) reached: this row is finished; positions after its EOS are padded"
    elif last_canvas:
        note = "max_new_tokens reached: generation ends"
    else:
        note = (f"encoded causally into the KV cache next; canvas {k + 1} starts from fresh uniform noise "
                "and attends to everything committed so far")
    return (f'{CSS}<div class="xp-frame" id="{fid}" data-kind="commit" data-canvas="{k}">'
            f'<div class="xp-head" id="{fid}-head">canvas {k} committed after {canvas.steps} '
            f'step{"s" if canvas.steps != 1 else ""}</div>{_prefix(glyphs, prompt, committed, fid)}'
            f'<table class="xp-grid" id="{fid}-canvas">{grid}</table>'
            f'<div class="xp-stop" id="{fid}-stop">{escape(note)}</div>{legend(fid)}</div>')
