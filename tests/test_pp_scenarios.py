"""The five PP scenarios, their JSON, and the CLI around them."""

import json
import subprocess
import sys

import pytest

from explainer import scenario
from explainer.model import task
from explainer.cli import main
from explainer.config import PP_NOT_SUPPORTED_MESSAGE
from explainer.scenario.pp import DEMO_PROMPT

KEYS = {"scenario", "pp_size", "backend", "outcome", "error", "processes_started", "output_text",
        "first_divergence", "bytes_per_step", "details"}
PP1_TEXT = task.spell(int(DEMO_PROMPT))


@pytest.fixture(scope="module")
def results():
    return {name: scenario.run(name) for name in ("pp1", "pp2-pre-fix", "pp2-pre-fix-int64", "pp2-gated",
                                                  "pp2-state-sync")}


def test_every_result_is_json_with_the_contract_keys(results):
    for name, res in results.items():
        data = json.loads(json.dumps(res.to_json()))
        assert KEYS <= data.keys() and data["scenario"] == name and data["backend"] == "inprocess"
        assert data["processes_started"] == 0
        assert res.summary.startswith(f"{name}: ") and res.trace is not None


def test_pp1_is_the_reference(results):
    r = results["pp1"]
    assert (r.outcome, r.pp_size, r.error, r.first_divergence, r.bytes_per_step) == ("ok", 1, None, None, {})
    assert r.output_text == PP1_TEXT


def test_pp2_pre_fix_crashes_in_warmup_and_reports_the_waiting_rank(results):
    r = results["pp2-pre-fix"]
    assert r.outcome == "warmup-crash" and r.output_text is None
    assert r.error == {"type": "AssertionError", "message": "assert sampled_token_ids.dtype == torch.int64"}
    assert r.details["failed_rank"] == 1 and r.details["failed_phase"] == "broadcast"
    waiting = r.details["ranks"][1]
    assert (waiting["rank"], waiting["phase"], waiting["type"]) == (0, "receive", "NothingPendingError")
    assert "nothing pending from rank 1" in waiting["message"]
    assert "rank 0 stopped in receive" in r.summary


def test_pp2_pre_fix_int64_diverges_visibly(results):
    r = results["pp2-pre-fix-int64"]
    assert r.outcome == "diverged" and r.error is None
    d = r.first_divergence
    assert (d["step"], d["rank"]) == (2, 0) and set(d["fields"]) == {"is_encoder_phase", "draft_tokens"}
    assert r.output_text != PP1_TEXT and r.details["pp1_text"] == PP1_TEXT
    assert r.details["output_divergence_step"] >= d["step"]
    assert "self_conditioning_embeds" in r.details["fields_diverged_during_run"]
    assert set(r.bytes_per_step) == {"hidden_states", "residual", "sampled_token_ids", "num_sampled_num_rejected"}
    assert "first divergence: engine step 2, rank 0 prepare reads is_encoder_phase" in r.summary


def test_pp2_gated_is_rejected_before_any_rank(results):
    r = results["pp2-gated"]
    assert r.outcome == "startup-rejected" and r.processes_started == 0
    assert r.error == {"type": "NotImplementedError", "message": PP_NOT_SUPPORTED_MESSAGE}
    assert r.details["is_NotImplementedError"] and r.details["is_ValueError"]
    assert [e.phase for e in r.trace.events] == ["startup-check"]


def test_pp2_state_sync_equals_pp1(results):
    r = results["pp2-state-sync"]
    assert r.outcome == "ok" and r.first_divergence is None
    assert r.output_text == PP1_TEXT and r.details["identical_to_pp1"] is True
    assert r.details["output_token_ids"] == results["pp1"].details["output_token_ids"]
    assert r.details["output_divergence_step"] is None
    assert r.bytes_per_step["self_conditioning_embeds"] == 4 * task.CANVAS_LENGTH * 64   # one request


def test_gated_is_the_same_on_the_processes_backend():
    r = scenario.run("pp2-gated", backend="processes")
    assert (r.outcome, r.processes_started, r.backend) == ("startup-rejected", 0, "processes")


def _same_story(a, b):
    ja, jb = a.to_json(), b.to_json()
    for j in (ja, jb):
        del j["backend"], j["processes_started"]
        for r in j["details"].get("ranks", []):
            if r["rank"] != j["details"]["failed_rank"]:      # a rank left waiting: in-process it finds
                r.pop("type"), r.pop("message")               # nothing pending, a real process sees its peer gone
    assert ja == jb
    ea, eb = ([(e.step, e.rank, e.phase, e.warmup, e.reads, e.transfers, e.views) for e in r.trace.events[1:]]
              for r in (a, b))                                 # [0]: the startup check, timed
    assert ea == eb


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pp1", "pp2-pre-fix", "pp2-pre-fix-int64", "pp2-state-sync"])
def test_processes_backend_tells_the_same_story(results, name):
    real = scenario.run(name, backend="processes")
    assert real.backend == "processes" and real.processes_started == (1 if name == "pp1" else 2)
    if name == "pp2-pre-fix":
        assert real.details["ranks"][1]["type"] in ("PeerGoneError", "TimeoutError")
    _same_story(results[name], real)


def test_cli_scenario_json(capsys):
    assert main(["scenario", "pp2-gated", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["outcome"] == "startup-rejected" and data["error"]["message"] == PP_NOT_SUPPORTED_MESSAGE


@pytest.mark.parametrize("argv, needle", [
    (["accuracy", "--pp", "1"], "--pp '1' is not accepted; accepted: an integer >= 2"),
    (["accuracy", "--mode", "naive"], "--mode 'naive' is not accepted; accepted: generic-int64, state-sync, generic"),
    (["accuracy", "--limit", "0"], "--limit '0' is not accepted"),
    (["scenario", "pp1", "--backend", "ray"], "unknown backend 'ray'; accepted: inprocess, processes"),
])
def test_cli_errors_exit_2(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and needle in err and "Traceback" not in err


def test_accuracy_command_reports_each_mode_next_to_pp1():
    proc = subprocess.run([sys.executable, "-m", "explainer", "accuracy", "--limit", "3", "--mode", "state-sync",
                           "--mode", "generic", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = {r["label"]: r for r in json.loads(proc.stdout)["rows"]}
    assert rows["PP=1"]["exact_match"] == 1.0
    assert rows["PP=2 state-sync"]["exact_match"] == 1.0 and rows["PP=2 state-sync"]["identical_to_pp1"] == 3
    assert rows["PP=2 generic"]["outcome"] == "warmup-crash"
    assert "PP=2 state-sync: 3/3" in proc.stderr                           # progress on stderr
