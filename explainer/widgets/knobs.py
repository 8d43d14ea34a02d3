"""Live knobs: change a setting, press Run, and a real run re-renders the picture (needs a kernel).

* ``SamplerKnobs`` (notebook 1): prompt number, entropy bound, seed → ``sampler.generate`` on the shipped
  checkpoint → a new canvas stepper.
* ``PPKnobs`` (notebook 2): PP size, PP mode (which state crosses ranks) and prompt → a real engine run
  (``scenario.pp.run_demo``) next to PP=1 → first divergence, text, and exact match on a few held-out
  prompts (``scenario.accuracy.engine_exact_match``) → a new rank stepper.

Each shows "ran at HH:MM:SS, took N ms" after every run, so a click always shows it ran, and says it
needs a running kernel (in a static export the buttons are dead; the stored picture still steps).
The construction does one real run with the defaults. No logic here beyond wiring: every number comes
from the library.
"""

from __future__ import annotations

import contextlib
import io
import time
from html import escape

import ipywidgets as W
import torch

from explainer.engine.core import one_torch_thread
from explainer.model import task
from explainer.model.cached_lm import CachedLM
from explainer.model.registry import DEFAULT_MODEL, PRE_FIX_MODEL
from explainer.sampler import StepRecorder, generate
from explainer.scenario.accuracy import engine_exact_match
from explainer.scenario.pp import run_demo
from explainer.scenario.stories import PP1
from explainer.vocab import PP_MODES_BY_STORY, REQUEST_STATE_FIELDS
from explainer.widgets.pp import rank_stepper
from explainer.widgets.sampler import canvas_stepper
from explainer.widgets.stepper import KERNEL_CLASS, kernel_note

__all__ = ["SamplerKnobs", "PPKnobs", "run_sampler", "run_pp"]



def _stamp(ms: float) -> str:
    return f'<span class="xp-ran">ran at {time.strftime("%H:%M:%S")}, took {ms:.0f} ms</span>'


def _controls(*children) -> W.VBox:
    """The controls that start a run: greyed out and unclickable on the static site (``KERNEL_CLASS``)."""
    box = W.VBox(list(children))
    box.add_class(KERNEL_CLASS)
    return box


def shown_outcome(outcome: str, same_text: bool, divergence) -> str:
    """What the panel calls the run: a run that completed but read stale state or changed the text diverged
    (the scenarios' own word, contract 3), never "ok" beside a text that differs."""
    return "diverged" if outcome == "ok" and (not same_text or divergence is not None) else outcome


# ---- notebook 1 --------------------------------------------------------------------------------------
def run_sampler(model, number: int, entropy_bound: float, seed: int, gen_cfg: dict):
    """One real generation: (recorder, prompt tensor, text, config used)."""
    cfg = {**gen_cfg, "entropy_bound": float(entropy_bound)}
    prompt = torch.tensor([task.encode(str(number))])
    rec = StepRecorder()
    with one_torch_thread():                  # tiny tensors: intra-op threads only add contention
        out = generate(CachedLM(model), prompt, generator=torch.Generator().manual_seed(int(seed)), recorder=rec,
                       **cfg)
    return rec, prompt, task.decode(out[0, prompt.shape[1]:]), cfg


class _Knob:
    """Shared by the knobs: a Run button that re-runs ``run()`` and shows a failure in the status line."""

    def _click(self) -> None:
        self.button.disabled = True
        try:
            self.run()
        except Exception as exc:                          # noqa: BLE001 - JupyterLab would swallow it
            self.status.value = f"run failed: {escape(type(exc).__name__)}: {escape(str(exc))}"
        finally:
            self.button.disabled = False

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


class SamplerKnobs(_Knob):
    """Prompt number, entropy bound, seed + Run → a real generation stepped frame by frame."""

    def __init__(self, model, gen_cfg: dict, *, number: int = 42, entropy_bound: float = 0.1, seed: int = 0):
        self.model, self.gen_cfg = model, dict(gen_cfg)
        self.number = W.BoundedIntText(value=number, min=0, max=999, description="prompt",
                                       layout=W.Layout(width="160px"))
        self.bound = W.FloatLogSlider(value=entropy_bound, base=10, min=-3, max=1, step=0.25,
                                      description="entropy bound", readout_format=".3g",
                                      style={"description_width": "initial"})
        self.seed = W.BoundedIntText(value=seed, min=0, max=99999, description="seed", layout=W.Layout(width="160px"))
        self.button = W.Button(description="Run", button_style="primary", icon="play")
        self.status = W.HTML()
        self.box = W.VBox()
        self.button.on_click(lambda _b: self._click())
        self.widget = W.VBox([_controls(W.HBox([self.number, self.bound, self.seed, self.button])), kernel_note(),
                              self.status, self.box])
        self.run()

    def run(self):
        start = time.perf_counter()
        rec, prompt, text, cfg = run_sampler(self.model, self.number.value, self.bound.value, self.seed.value,
                                             self.gen_cfg)
        self.stepper = canvas_stepper(rec, prompt, vocab=task.VOCAB, config=cfg)
        ms = (time.perf_counter() - start) * 1e3
        expected = task.spell(self.number.value) if 100 <= self.number.value <= 999 else None
        verdict = ("" if expected is None else
                   f" · {'✓ equals' if text == expected else '✗ differs from'} {expected!r}")
        self.last = {"text": text, "steps": [c.steps for c in rec.canvases], "ms": ms}
        self.status.value = (f'<div id="xp-knob-sampler" style="font:13px system-ui,sans-serif">{_stamp(ms)} · prompt '
                             f"{self.number.value}, bound {self.bound.value:.3g}, seed {self.seed.value} → "
                             f"<code>{escape(repr(text))}</code>{escape(verdict)} · steps per canvas "
                             f"{self.last['steps']}</div>")
        self.box.children = [self.stepper.widget]
        return self.last


# ---- notebook 2 --------------------------------------------------------------------------------------
def run_pp(pp: int, mode: str, number: int, *, seed: int = 0, held_out: int = 3,
           sync_fields: tuple[str, ...] | None = None) -> dict:
    """A real engine run of one prompt at ``pp``/``mode`` next to PP=1, plus exact match on ``held_out``
    held-out prompts in the same configuration. The pre-#45828 model, since the post-fix one rejects PP > 1.
    ``sync_fields`` (state-sync only): exactly which per-request state fields the last rank sends."""
    model = PRE_FIX_MODEL if pp > 1 else DEFAULT_MODEL
    fields = tuple(sync_fields) if (sync_fields is not None and mode == "state-sync" and pp > 1) else None
    res = run_demo(f"knob-pp{pp}-{mode}", "inprocess", model=model, pp=pp, mode=mode, prompt=str(number), seed=seed,
                   sync_fields=fields)
    ref = run_demo(PP1.name, "inprocess", model=DEFAULT_MODEL, pp=1, prompt=str(number), seed=seed)
    numbers = task.held_out_numbers()[:held_out]
    with contextlib.redirect_stderr(io.StringIO()):        # the accuracy command's progress line
        acc = engine_exact_match(numbers, model=model, pp=pp, mode=mode, seed=seed, label=f"PP={pp} {mode}", sync_fields=fields)
    return {"result": res, "reference": ref, "accuracy": acc, "numbers": numbers,
            "first_divergence": res.trace.first_divergence() if res.outcome == "ok" else None}


class PPKnobs(_Knob):
    """PP size, PP mode and prompt + Run → a real engine run: outcome, first divergence, accuracy, stepper."""

    def __init__(self, *, pp: int = 2, mode: str = "generic-int64", number: int = 451, held_out: int = 3,
                 sync_fields: tuple[str, ...] = ()):
        self.held_out = held_out
        chosen = set(sync_fields)          # none ticked by default: which fields to send is the sync-fields exercise
        # state-sync: one checkbox per real per-request state field (EngineConfig.sync_fields)
        self.fields = {f: W.Checkbox(value=f in chosen, description=f, indent=False,
                                     layout=W.Layout(width="240px")) for f in REQUEST_STATE_FIELDS}
        self.pp = W.ToggleButtons(options=[1, 2, 3, 4], value=pp, description="PP size",
                                  style={"button_width": "40px"})
        self.mode = W.ToggleButtons(options=list(PP_MODES_BY_STORY), value=mode, description="PP mode",
                                    tooltips=["back-channel: sampled ids only (int64)",
                                              "also sends the state fields you tick",
                                              "pre-#45828 as shipped: int32 ids"],
                                    style={"button_width": "auto"})
        self.number = W.BoundedIntText(value=number, min=100, max=999, description="prompt",
                                       layout=W.Layout(width="160px"))
        self.button = W.Button(description="Run", button_style="primary", icon="play")
        self.status = W.HTML()
        self.box = W.VBox()
        self.button.on_click(lambda _b: self._click())
        fields = W.HTML('<div style="font:12px system-ui,sans-serif;color:#555">state fields the last rank sends: '
                        "generic / generic-int64: none (sampled ids only); state-sync: the ticked ones</div>")
        self.ticks = W.Box(list(self.fields.values()), layout=W.Layout(flex_flow="row wrap", width="100%"))
        self.widget = W.VBox([_controls(self.pp, self.mode, W.HBox([self.number, self.button]), fields, self.ticks),
                              kernel_note(), self.status, self.box])
        self.mode.observe(lambda _c: self._fields_apply(), "value")
        self.pp.observe(lambda _c: self._fields_apply(), "value")
        self._fields_apply()
        self.run()

    def _fields_apply(self) -> None:
        """The state-field checkboxes apply only to state-sync at PP > 1: elsewhere nothing is sent, so they are
        disabled and hidden rather than shown ticked."""
        applies = self.mode.value == "state-sync" and self.pp.value > 1
        for box in self.fields.values():
            box.disabled = not applies
        self.ticks.layout.display = None if applies else "none"

    def run(self) -> dict:
        start = time.perf_counter()
        chosen = tuple(f for f, box in self.fields.items() if box.value)
        out = run_pp(self.pp.value, self.mode.value, self.number.value, held_out=self.held_out, sync_fields=chosen)
        res, ref, acc = out["result"], out["reference"], out["accuracy"]
        self.stepper = (rank_stepper(res.trace, reference=ref.trace, header_id="xp-pp-knob-stepper")
                        if res.trace.events else None)
        ms = (time.perf_counter() - start) * 1e3
        div = out["first_divergence"]
        synced = f" syncing {', '.join(chosen) or 'nothing'}" if self.mode.value == "state-sync" else ""
        same = res.output_text == ref.output_text
        shown = shown_outcome(res.outcome, same, div) if not res.error else res.outcome
        lines = [f"{_stamp(ms)} · PP={self.pp.value}, {self.mode.value}{escape(synced)}, prompt {self.number.value}: "
                 f"outcome <b>{'✗ ' if shown != 'ok' else '✓ '}{escape(shown)}</b>"]
        if res.error:
            lines.append(f"✗ {escape(res.error['type'])}: {escape(res.error['message'])}")
        else:
            lines.append(f"text <code>{escape(repr(res.output_text))}</code> vs PP=1 "
                         f"<code>{escape(repr(ref.output_text))}</code> {'✓ same' if same else '≠ differs'}")
            lines.append("first divergence: " + ("none (✓ no rank ever read state that differs from the owner's)"
                                                 if div is None else
                         f"≠ engine step {div['step']}, rank {div['rank']} {div['phase']} reads "
                         f"{', '.join(div['fields'])}"))
        em = acc.get("exact_match")
        lines.append(f"held-out exact match on {len(out['numbers'])} prompts {out['numbers']}: "
                     + (f"{em:.0%}" if em is not None else escape(str(acc.get("outcome")))))
        self.last = {"outcome": res.outcome, "shown_outcome": shown, "text": res.output_text, "first_divergence": div,
                     "exact_match": em, "ms": ms}
        self.status.value = ('<div id="xp-knob-pp" style="font:13px system-ui,sans-serif">'
                             + "<br>".join(lines) + "</div>")
        self.box.children = [self.stepper.widget] if self.stepper else []
        return self.last

