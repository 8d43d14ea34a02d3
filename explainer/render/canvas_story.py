"""A recorded generation as a story: every step and commit as a frame with its caption (``canvas_story``), the
per-canvas summary (``render_summary``) and the temperature schedule (``render_temperatures``). The frames are
``canvas.render_step`` / ``canvas.render_commit``; pure functions over ``explainer.sampler.StepRecorder``."""

from __future__ import annotations

from html import escape
from typing import Mapping, Sequence

import torch

from explainer.render.canvas import CSS, DEFAULTS, Glyphs, cell, legend, render_commit, render_step
from explainer.render.rules import ACCEPT, RENOISE
from explainer.sampler import StepRecord, StepRecorder, linear_temperature

__all__ = ["canvas_story", "canvas_frames", "render_summary", "render_temperatures", "accepted_runs"]


def _by_canvas(recorder: StepRecorder) -> dict[int, list[StepRecord]]:
    out: dict[int, list[StepRecord]] = {}
    for rec in recorder.steps:
        out.setdefault(rec.canvas_index, []).append(rec)
    return out


def _stop_reason(steps: list[StepRecord], row: int, cfg: Mapping) -> tuple[int, str]:
    """(steps this row denoised, why it stopped)."""
    for n, rec in enumerate(steps, 1):
        if rec.stable is not None and bool(rec.finished[row]):
            return n, "stable and confident"
    return len(steps), f"step budget ({cfg['max_denoising_steps']}) used up"


def canvas_story(recorder: StepRecorder, prompt, *, vocab: Sequence[str] | None = None,
                 config: Mapping | None = None, row: int = 0,
                 commit_frames: bool = True) -> tuple[list[str], list[str], dict[str, int]]:
    """(frames, one caption per frame, bookmarks {label: frame}) of one recorded generation, in order:
    every step of every canvas (+ one commit frame per canvas). Bookmarks: the first renoise, each commit."""
    cfg = {**DEFAULTS, **(config or {})}
    glyphs = Glyphs(vocab, cfg["pad_token_id"], cfg["eos_token_id"])
    prompt = prompt[row].tolist() if isinstance(prompt, torch.Tensor) and prompt.dim() == 2 else list(prompt)
    commits = {c.canvas_index: c for c in recorder.canvases}
    frames, captions, marks, committed = [], [], {}, []
    by_canvas = _by_canvas(recorder)
    for index, steps in sorted(by_canvas.items()):
        drafts: list[list[int]] = []
        for n, rec in enumerate(steps, 1):
            frozen_before = n > 1 and rec.stable is not None and bool(steps[n - 2].finished[row])
            frames.append(render_step(rec, step_number=n, prompt=prompt, committed=committed, glyphs=glyphs,
                                      config=cfg, row=row, last=n == len(steps), frozen_before=frozen_before,
                                      num_canvases=len(by_canvas), previous=drafts))
            captions.append(_step_caption(rec, n, row, cfg, frozen_before, last=n == len(steps)))
            n_ren = int((~rec.accepted[row]).sum())
            if n_ren and not frozen_before and "first renoise" not in marks:
                marks["first renoise"] = len(frames) - 1
            drafts = drafts + [rec.argmax[row].tolist()]
        if index in commits:
            text = "".join(glyphs(t) for t in commits[index].committed[row].tolist())
            if commit_frames:
                frames.append(render_commit(commits[index], prompt=prompt, committed=committed, glyphs=glyphs,
                                            config=cfg, row=row, last_canvas=index == max(by_canvas)))
                captions.append(f"canvas {index + 1} committed after {commits[index].steps} "
                                f"step{'s' if commits[index].steps != 1 else ''}: '{text}' appended")
                marks[f"commit {index + 1}"] = len(frames) - 1
            committed = committed + [commits[index].committed[row].tolist()]
    return frames, captions, marks


def _step_caption(rec: StepRecord, n: int, row: int, cfg: Mapping, frozen_before: bool, last: bool) -> str:
    head = f"canvas {rec.canvas_index + 1}, step {n}" + (" (from random tokens): " if n == 1 else ": ")
    if frozen_before:
        return head + "row already finished, frozen"
    acc = int(rec.accepted[row].sum())
    out = head + f"{acc} {ACCEPT} accepted, {rec.accepted.shape[-1] - acc} {RENOISE} renoised"
    if rec.stable is not None and bool(rec.finished[row]):
        return out + "; stable and confident → stop"
    if last:
        return out + "; step budget used up → commit"
    if rec.stable is not None:
        why = [w for w, ok in (("not stable", bool(rec.stable[row])), ("not confident", bool(rec.confident[row])))
               if not ok]
        return out + f"; {' and '.join(why)} → continue"
    return out + " → continue"


def canvas_frames(recorder: StepRecorder, prompt, *, vocab: Sequence[str] | None = None, config: Mapping | None = None,
                  row: int = 0, commit_frames: bool = True) -> list[str]:
    """Every recorded step of every canvas as a frame (+ one commit frame per canvas), in order."""
    return canvas_story(recorder, prompt, vocab=vocab, config=config, row=row, commit_frames=commit_frames)[0]


def accepted_runs(counts: list[int], length: int | None = None) -> str:
    """Accepted positions per step, runs of equal counts folded and named:
    [8, 7, 8, 8, 8] -> 'step 1: 8 · step 2: 7 · steps 3–5: 8 each' ('8/8' when ``length`` is given)."""
    out, i = [], 0
    of = f"/{length}" if length else ""
    while i < len(counts):
        j = i
        while j < len(counts) and counts[j] == counts[i]:
            j += 1
        out += ([f"steps {i + 1}–{j}: {counts[i]}{of} each"] if j - i >= 3 else
                [f"step {k + 1}: {counts[i]}{of}" for k in range(i, j)])
        i = j
    return " · ".join(out)


def render_summary(recorder: StepRecorder, *, vocab: Sequence[str] | None = None, config: Mapping | None = None,
                   row: int = 0) -> str:
    """One table row per canvas: steps taken, accepted count per step, stopping reason, committed tokens."""
    cfg = {**DEFAULTS, **(config or {})}
    glyphs = Glyphs(vocab, cfg["pad_token_id"], cfg["eos_token_id"])
    commits = {c.canvas_index: c for c in recorder.canvases}
    rows, forwards, tokens = [], 0, 0
    for index, steps in sorted(_by_canvas(recorder).items()):
        n, reason = _stop_reason(steps, row, cfg)
        accepted = accepted_runs([int(r.accepted[row].sum()) for r in steps[:n]], steps[0].accepted.shape[-1])
        commit = commits.get(index)
        appended = "".join(cell(glyphs, t, "prefix") for t in commit.committed[row].tolist()) if commit else "—"
        finished = commit is not None and bool(commit.finished[row])
        forwards, tokens = forwards + len(steps), tokens + steps[0].canvas.shape[-1]
        rows.append(f'<tr id="xp-summary-c{index + 1}"><td>{index + 1}</td><td>{n}</td><td>{accepted}</td>'
                    f'<td>{escape(reason)}</td><td style="white-space:nowrap">{appended}</td>'
                    f'<td>{"yes" if finished else "no"}</td></tr>')
    head = ("<tr><th>canvas</th><th>steps taken</th><th>accepted (✓) positions per step</th><th>stopped because</th>"
            "<th>committed</th><th>finished (EOS)</th></tr>")
    total = (f'<div class="xp-stop" id="xp-summary-total">{forwards} decoder forward{"s" if forwards != 1 else ""} '
             f"for {tokens} tokens ({tokens / max(forwards, 1):.2f} tokens per forward)</div>")
    return (f'{CSS}<div class="xp-frame" id="xp-summary" data-kind="summary"><table class="xp-summary">'
            f'{head}{"".join(rows)}</table>{total}{legend("xp-summary")}</div>')


def render_temperatures(recorder: StepRecorder, *, config: Mapping | None = None) -> str:
    """One row per distinct ``cur_step`` the run used: the temperature the sampler divided the logits by,
    ``linear_temperature(cur_step, N)`` recomputed from the schedule, and which steps of which canvases used it
    (every canvas restarts at cur_step N, so the rows would otherwise repeat)."""
    cfg = {**DEFAULTS, **(config or {})}
    n_steps, t_min, t_max = cfg["max_denoising_steps"], cfg["t_min"], cfg["t_max"]
    used: dict[int, dict] = {}
    for index, steps in sorted(_by_canvas(recorder).items()):
        for n, rec in enumerate(steps, 1):
            u = used.setdefault(rec.cur_step, {"n": n, "T": set(), "canvases": []})
            u["T"].add(f"{rec.temperature:.4f}")
            u["canvases"].append(index + 1)
    cells = []
    for cur_step, u in sorted(used.items(), reverse=True):
        expected = 1.0 if t_min is None else linear_temperature(cur_step, n_steps, t_min, t_max)
        canv = u["canvases"]
        who = (f"all {len(canv)} canvases" if len(canv) == len(_by_canvas(recorder)) and len(canv) > 1 else
               "canvas " + ", ".join(map(str, canv)) if len(canv) == 1 else "canvases " + ", ".join(map(str, canv)))
        cells.append(f"<tr><td>{cur_step}</td><td>{u['n']}</td><td>{' / '.join(sorted(u['T']))}</td>"
                     f"<td>{expected:.4f}</td><td>{escape(who)}</td></tr>")
    rule = ("schedule off: T = 1" if t_min is None else
            f"T = t_min + (t_max − t_min) · cur_step / N with t_min {t_min:g}, t_max {t_max:g}, N {n_steps}; "
            f"cur_step counts N..1 and restarts at N on every canvas, so T never reaches t_min "
            f"(last possible value {linear_temperature(1, n_steps, t_min, t_max):.4f})")
    return (f'{CSS}<div class="xp-frame" id="xp-temperatures" data-kind="temperatures">'
            f'<table class="xp-summary"><tr><th>cur_step</th><th>step of its canvas</th><th>T used</th>'
            f'<th>linear_temperature(cur_step, N)</th><th>used by</th></tr>{"".join(cells)}</table>'
            f'<div class="xp-legend">{escape(rule)}</div></div>')
