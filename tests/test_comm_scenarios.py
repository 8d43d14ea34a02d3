"""The three communicator scenarios: JSON shape and the story each one tells."""

import json
import subprocess
import sys

import pytest

from explainer import scenario

pytestmark = pytest.mark.slow
FALLBACK = ("INFO CPU SHM communicator disabled for group pp:0: ranks do not share the same SHM group name, "
            "falling back to torch.distributed.")
KEYS = {"scenario", "pp_size", "backend", "outcome", "error", "processes_started", "output_text",
        "first_divergence", "bytes_per_step", "details"}
BYTES = {"hidden_states": 2 * 8 * 64 * 4, "residual": 2 * 8 * 64 * 4}


def _run(name, backend="processes"):
    data = scenario.run(name, backend=backend).to_json()
    json.dumps(data)
    assert KEYS <= data.keys()
    assert data["scenario"] == name and data["pp_size"] == 2 and data["backend"] == "processes"
    assert data["processes_started"] == 2 and data["details"]["transport"] == "processes"
    assert data["details"]["processes_exited"] is True
    assert "real rank processes" in data["details"]["note"]
    return data


def test_same_node():
    d = _run("comm-same-node")
    assert d["outcome"] == "ok" and d["error"] is None
    assert d["bytes_per_step"] == BYTES
    assert d["details"]["backend_per_rank"] == ["shm", "shm"]
    assert all(p.endswith("names_agree=yes -> shm") for p in d["details"]["decision_path_per_rank"])
    assert d["details"]["log_lines"] == []
    assert d["details"]["per_rank"][1]["received_equal"] is True


def test_inter_node_pre_fix():
    d = _run("comm-inter-node-pre-fix")
    assert d["outcome"] == "runtime-error" and d["bytes_per_step"] == {}
    assert d["error"] == {"type": "AttributeError", "message": "module 'torch.distributed' has no attribute 'recv_tensor_dict'"}
    r0, r1 = d["details"]["per_rank"]
    assert r0["error"] == {"type": "AttributeError", "message": "module 'torch.distributed' has no attribute 'send_tensor_dict'"}
    assert r1["error"] == d["error"]
    assert d["details"]["backend_per_rank"] == ["torch.distributed"] * 2
    assert r0["use_cpu_custom_send_recv"] and r1["use_cpu_custom_send_recv"]   # the build-based gate
    assert r0["ident"] != r1["ident"]
    assert d["details"]["log_lines"] == [f"rank 0: {FALLBACK}", f"rank 1: {FALLBACK}"]


def test_inter_node_fixed():
    d = _run("comm-inter-node-fixed")
    assert d["outcome"] == "ok" and d["error"] is None and d["bytes_per_step"] == BYTES
    assert d["details"]["backend_per_rank"] == ["torch.distributed"] * 2
    assert all(p.endswith("names_agree=NO -> torch.distributed") for p in d["details"]["decision_path_per_rank"])
    assert d["details"]["log_lines"] == [f"rank 0: {FALLBACK}", f"rank 1: {FALLBACK}"]
    r0, r1 = d["details"]["per_rank"]
    assert not r0["use_cpu_custom_send_recv"] and r1["received_equal"] is True
    assert r1["gate_inputs"] == {"is_cpu": True, "device_communicator": True, "supports_tensor_dict": False}


def test_inprocess_request_still_runs_real_processes_and_says_so():
    d = _run("comm-inter-node-fixed", backend="inprocess")      # _run asserts backend == "processes"
    assert d["outcome"] == "ok" and "multi-process by nature" in d["details"]["note"]


def test_cli_prints_one_json_object():
    proc = subprocess.run([sys.executable, "-m", "explainer", "scenario", "comm-inter-node-pre-fix",
                           "--backend", "processes", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert data["outcome"] == "runtime-error" and data["error"]["type"] == "AttributeError"
