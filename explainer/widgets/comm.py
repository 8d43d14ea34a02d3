"""Widgets for the CPU communicator notebook (vLLM PR #40150): a live lab and precomputed scenario frames.

``CommLab``: architecture, "shm ops built", node layout, gate and group prefix controls plus a Run
button. A click re-runs the real backend selection and a real tensor-dict send on 2 rank processes
(``run_lab``, bounded in time) and re-renders the decision tree, the routing diagram and the per-rank
table into one ``HTML`` widget. The construction does one real run with the defaults, shown as one line
per rank (its pictures are the notebook's first run's), so the first display is deterministic and short;
nothing changes until a click.

``scenario_frames``: one precomputed frame per named scenario (outcome, errors, decision tree, route) in a
``Stack`` jslinked to ``ToggleButtons``, so it also works in a static HTML export with no kernel.
"""

from __future__ import annotations

import time
from html import escape
from typing import Mapping, Sequence

import graphviz
import ipywidgets as W

from explainer.distributed.device_communicators.comm_config import MACHINE_TO_ARCH
from explainer.distributed.launch import free_ports, launch
from explainer.errors import UsageError
from explainer.render import comm as R
from explainer.scenario.comm import exchange_rank
from explainer.vocab import COMM_GATES as GATES
from explainer.widgets.stepper import KERNEL_CLASS, fitted_stack, kernel_note


ARCHES = ("x86_64", "aarch64", "ppc64le", "s390x")        # platform.machine() spellings
LAYOUTS = {"1 node": 1, "2 nodes": 2}
PREFIXES = ("pp", "tp", "dp")                             # dp: not tp/pp -> silent fallback (older vLLM)


def run_lab(arch: str = "x86_64", shm_ops_built: bool = True, nodes: int = 1, gate: str = "post-40150",
            group_prefix: str = "pp", timeout: float = 20.0) -> list[dict]:
    """Real run on 2 rank processes; per-rank records (with ``node`` and ``exitcode``), as the scenarios give."""
    if arch not in ARCHES:
        raise UsageError(f"arch {arch!r}: accepted {', '.join(ARCHES)}")
    if nodes not in (1, 2):
        raise UsageError(f"nodes {nodes!r}: accepted 1 or 2")
    if gate not in GATES:
        raise UsageError(f"gate {gate!r}: accepted {', '.join(GATES)}")
    if group_prefix not in PREFIXES:
        raise UsageError(f"group_prefix {group_prefix!r}: accepted {', '.join(PREFIXES)}")
    ports = free_ports(nodes)                             # each node's executor picks its own port
    node_of = [0, 0] if nodes == 1 else [0, 1]
    env = [{"EXPLAINER_DIST_IDENT": str(ports[node_of[r]]), "EXPLAINER_CPU_ARCH": MACHINE_TO_ARCH[arch],
            "EXPLAINER_SHM_OPS": "1" if shm_ops_built else "0", "EXPLAINER_COMM_TIMEOUT": "8"} for r in range(2)]
    out = []
    for res in launch(exchange_rank, 2, args=(gate, group_prefix), env_per_rank=env, timeout=timeout):
        info = dict(res.value) if res.ok else {"rank": res.rank, "error": res.error, "backend": None,
                                               "log_lines": [], "transfers": [], "gate": gate}
        info.update(node=node_of[res.rank], exitcode=res.exitcode)
        out.append(info)
    return out


def outcome(per_rank: Sequence[Mapping]) -> str:
    """``delivered`` or ``<ErrorType> on rank(s) ...``."""
    errs = [i for i in per_rank if i.get("error")]
    if errs:
        types = sorted({i["error"]["type"] for i in errs})
        return f"{'/'.join(types)} on rank(s) {', '.join(str(i['rank']) for i in errs)}"
    return "delivered" if per_rank[-1].get("received_equal") else "not delivered"


def svg(dot: str) -> str:
    """DOT source -> SVG text with the ``dot`` binary."""
    return graphviz.Source(dot).pipe(format="svg").decode()


def run_frame(title: str, per_rank: Sequence[Mapping], *, route: bool = True, table: bool = True) -> str:
    """Decision tree (rank 0) + tensor-dict routing (``route``) as SVG, then the per-rank table (``table``)."""
    tree = [svg(R.run_selection_dot(per_rank))] if per_rank[0].get("decision") else []   # rank 0 may have died
    routes = [svg(R.tensor_dict_dot(per_rank))] if route else []
    return R.frame_html(f"{title} — outcome: {outcome(per_rank)}", per_rank, tree + routes, table=table)


class CommLab:
    """Controls + Run: re-runs the real selection and send on 2 processes and re-renders the result."""

    def __init__(self, *, timeout: float = 20.0):
        self.timeout = timeout
        self.arch = W.Dropdown(options=ARCHES, value="x86_64", description="architecture")
        self.shm_ops = W.Checkbox(value=True, description="shm ops built", indent=False)
        self.layout = W.ToggleButtons(options=list(LAYOUTS), value="1 node", description="ranks on")
        self.gate = W.ToggleButtons(options=list(GATES), value="post-40150", description="gate")
        self.prefix = W.Dropdown(options=PREFIXES, value="pp", description="group prefix")
        self.button = W.Button(description="Run (2 processes)", button_style="primary")
        self.status = W.HTML()
        self.html = W.HTML()
        self.runs = 0
        self.button.on_click(self._on_click)
        wrap = W.Layout(flex_flow="row wrap", align_items="center")
        controls = W.VBox([W.HBox([self.arch, self.prefix, self.shm_ops], layout=wrap),
                           W.HBox([self.layout, self.gate, self.button], layout=wrap)])
        controls.add_class(KERNEL_CLASS)
        self.widget = W.VBox([controls, kernel_note(), self.status, self.html])
        self.run(pictures=False)        # the default settings are notebook 3's first run: its pictures are there

    def settings(self) -> dict:
        return dict(arch=self.arch.value, shm_ops_built=self.shm_ops.value, nodes=LAYOUTS[self.layout.value],
                    gate=self.gate.value, group_prefix=self.prefix.value)

    def run(self, pictures: bool = True) -> list[dict]:
        """One real run with the current control values; updates the status line and the HTML (the decision
        tree, the route and the table; without ``pictures``, one line per rank)."""
        s = self.settings()
        start = time.perf_counter()
        self.last = run_lab(**s, timeout=self.timeout)
        self.runs += 1
        ms = (time.perf_counter() - start) * 1e3
        title = (f"{s['arch']}, shm ops built={s['shm_ops_built']}, {s['nodes']} node(s), gate {s['gate']}, "
                 f"group {s['group_prefix']}")
        self.status.value = (f'<span id="xp-comm-outcome" data-outcome="{outcome(self.last)}" data-runs="{self.runs}">'
                             f'run {self.runs}: ran at {time.strftime("%H:%M:%S")}, took {ms:.0f} ms on 2 new rank '
                             f"processes · {title} — <b>{outcome(self.last)}</b></span>")
        self.html.value = run_frame(title, self.last) if pictures else R.summary_html(
            f"{title} — outcome: {outcome(self.last)}", self.last,
            "Each Run draws its own decision tree, tensor-dict route and per-rank table here.")
        return self.last

    def _on_click(self, _button) -> None:
        self.button.disabled = True
        try:
            self.run()
        except Exception as exc:                          # noqa: BLE001 - JupyterLab would swallow it
            self.status.value = (f'<span id="xp-comm-outcome" data-outcome="error">run failed: '
                                 f"{escape(type(exc).__name__)}: {escape(str(exc))}</span>")
        finally:
            self.button.disabled = False

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


class ScenarioFrames:
    """ToggleButtons jslinked to a Stack of precomputed frames (works without a kernel)."""

    def __init__(self, runs: Mapping[str, Sequence[Mapping]]):
        if not runs:
            raise UsageError("ScenarioFrames needs at least one run (got 0)")
        self.names = list(runs)
        # the decision and its consequence, run by run (each run's ranks are printed where it runs)
        self.frames = [run_frame(n, runs[n], table=False) for n in self.names]
        self.buttons = W.ToggleButtons(options=self.names, value=self.names[0],   # no label: one row less
                                       style={"button_width": "auto"})
        self.stack, box = fitted_stack(self.frames)      # as tall as the tallest frame: no jump on a switch
        W.jslink((self.buttons, "index"), (self.stack, "selected_index"))
        self.buttons.observe(lambda ch: setattr(self.stack, "selected_index", ch["new"]), names="index")
        self.widget = W.VBox([self.buttons, box])

    @property
    def current(self) -> str:
        return self.frames[self.stack.selected_index]

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


def scenario_frames(results: Mapping) -> ScenarioFrames:
    """Frames from ``ScenarioResult`` objects (or per-rank lists) keyed by scenario name."""
    return ScenarioFrames({n: (r.details["per_rank"] if hasattr(r, "details") else r) for n, r in results.items()})
