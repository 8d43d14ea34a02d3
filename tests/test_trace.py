"""The trace (Seam 4): events, per-rank views, first divergence, bytes, JSON round trip."""

import json

import pytest

from explainer.trace import PHASES, Trace, Transfer


class FakeRank:
    """A rank whose state the test moves by hand."""

    def __init__(self, enc=True, drafts=(0, 0), sc=0.0):
        self.state = {"r": {"is_encoder_phase": enc, "draft_tokens": list(drafts), "self_conditioning_embeds": sc,
                            "canvas": [1, 2], "step": 0, "num_computed_tokens": 3}}

    def view(self):
        return {k: dict(v) for k, v in self.state.items()}


def two_rank_trace(stale: bool) -> Trace:
    t = Trace(meta={"pp_size": 2})
    r0, r1 = FakeRank(), FakeRank()
    t.attach(0, r0.view)
    t.attach(1, r1.view)
    reads0 = {"r": ["is_encoder_phase", "draft_tokens", "self_conditioning_embeds"]}
    for step in (1, 2, 3):
        t.set_step(step)
        t.record(0, "prepare", reads=reads0)
        t.record(0, "send", transfers=[Transfer(0, 1, "hidden_states", "float32", [1, 2, 4], 32)])
        t.record(1, "prepare", reads={"r": ["is_encoder_phase"]})
        r1.state["r"].update(is_encoder_phase=False, draft_tokens=[5, step], self_conditioning_embeds=1.5 * (step > 1))
        t.record(1, "sample", data={"emitted": {"r": [step]} if step == 3 else {}})
        t.record(1, "broadcast", transfers=[Transfer(1, 0, "sampled_token_ids", "int64", [1, 3], 24, "broadcast")])
        if not stale:
            r0.state["r"].update(r1.state["r"])
        t.record(0, "receive")
    return t


def test_first_divergence_names_step_rank_and_fields():
    t = two_rank_trace(stale=True)
    d = t.first_divergence()
    assert (d["step"], d["rank"], d["phase"], d["request"]) == (2, 0, "prepare", "r")
    assert d["fields"] == ["is_encoder_phase", "draft_tokens"]
    assert d["values"]["draft_tokens"] == {"rank": [0, 0], "owner": [5, 1]}
    assert [x["fields"] for x in t.divergences()][-1] == ["is_encoder_phase", "draft_tokens",
                                                          "self_conditioning_embeds"]
    assert two_rank_trace(stale=False).first_divergence() is None


def test_owner_reads_are_never_divergences():
    t = two_rank_trace(stale=True)
    assert all(d["rank"] == 0 for d in t.divergences())


def test_views_carry_forward_and_are_shared():
    t = two_rank_trace(stale=True)
    a, b = t.events[0], t.events[1]                      # two rank-0 events: rank 1's view is shared
    assert a.views[1] is b.views[1]
    assert set(a.views) == {0, 1}
    assert t.events[4].views[1]["r"]["is_encoder_phase"] is False     # after rank 1's sample
    assert t.events[0].views[1]["r"]["is_encoder_phase"] is True


def test_output_divergence_and_bytes():
    t = two_rank_trace(stale=True)
    assert t.step_outputs() == {1: {}, 2: {}, 3: {"r": [3]}}
    assert t.first_output_divergence(two_rank_trace(stale=False)) is None
    other = two_rank_trace(stale=False)
    other.select(step=3, phase="sample")[0].data["emitted"] = {"r": [9]}
    assert t.first_output_divergence(other) == 3
    assert t.bytes_per_step() == {"hidden_states": 32, "sampled_token_ids": 24}


def test_json_round_trip_rebuilds_views():
    t = two_rank_trace(stale=True)
    data = t.to_json()
    text = json.dumps(data)
    assert all("views" not in e for e in data["events"])              # each event stores only its own view
    back = Trace.from_json(text)
    assert len(back.events) == len(t.events)
    for x, y in zip(t.events, back.events):
        assert (x.index, x.step, x.rank, x.phase, x.reads, x.transfers) == (y.index, y.step, y.rank, y.phase,
                                                                          y.reads, y.transfers)
        assert x.views == y.views
    assert back.first_divergence() == t.first_divergence()
    assert back.meta == {"pp_size": 2}


def test_engine_trace_round_trips():
    from explainer.scenario.pp import run_demo
    res = run_demo("x", "inprocess", model="diffusion-gemma-tiny@pre-45828", pp=2, mode="generic-int64")
    back = Trace.from_json(json.dumps(res.trace.to_json()))
    assert back.first_divergence() == res.trace.first_divergence()
    assert back.bytes_per_step() == res.trace.bytes_per_step()
    assert {e.phase for e in back.events} <= set(PHASES)
    assert len(json.dumps(res.trace.to_json())) < 500_000            # small enough to ship to a widget


def test_disabled_trace_records_nothing():
    t = Trace(enabled=False)
    t.attach(0, lambda: {"r": {}})
    assert t.record(0, "prepare") is None and t.events == []


def test_unknown_phase_rejected():
    with pytest.raises(ValueError, match="phase 'compute' is not one of"):
        Trace().record(0, "compute")


def test_the_mechanism_carries_no_instrumentation():
    """The trace is taken from outside (``trace/recorder.py``: a group wrapper and the executor's calls): the
    runner, the worker and the engine loop name no observer, trace or phase (``is_encoder_phase`` is a state
    field), nothing in ``explainer/worker/`` imports the trace, and the process group enters no phase itself."""
    import re
    from pathlib import Path

    import explainer

    root = Path(explainer.__file__).parent
    for rel in ("worker/model_runner.py", "worker/worker.py", "engine/core.py"):
        hits = [f"{rel}:{k}: {ln}" for k, ln in enumerate((root / rel).read_text().splitlines(), 1)
                if re.search(r"observer|trace|enter\(|phase", ln.replace("is_encoder_phase", ""))]
        assert hits == []
    for path in (root / "worker").glob("*.py"):
        assert "explainer.trace" not in path.read_text(), path.name
    assert not re.search(r"observer|trace\.|phases|enter\(", (root / "distributed" / "parallel_state.py").read_text())
