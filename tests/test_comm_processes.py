"""CpuCommunicator and GroupCoordinator across real rank processes (gloo on 127.0.0.1 + /dev/shm).

Each launch batches many checks: a worker returns what it saw and the test asserts on it here.
"""

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
import torch
import torch.distributed as dist

from explainer.distributed.device_communicators import shm
from explainer.distributed.device_communicators.comm_config import CommConfig
from explainer.distributed.device_communicators.cpu_communicator import NO_DICT_FASTPATH, ONLY_TENSORS
from explainer.distributed.launch import launch, values
from explainer.distributed.parallel_state import GroupCoordinator

pytestmark = pytest.mark.slow
CHUNK = shm.MIN_CHUNK_BYTES


def _listing(tag):
    return sorted(n for n in os.listdir(shm.SHM_DIR) if tag in n)


def _dicts():
    g = torch.Generator().manual_seed(1)
    return [
        {"fp32": torch.randn(3, 5, generator=g), "bf16": torch.randn(7, 3, generator=g).to(torch.bfloat16),
         "int64": torch.randint(-9, 9, (4, 4), generator=g), "bool": torch.rand(4, 9, generator=g) > 0.5},
        {"zero_d": torch.tensor(2.5), "empty": torch.empty(0, 4), "empty_i": torch.empty(3, 0, dtype=torch.int64),
         "after_empty": torch.arange(10)},
        {"hidden_states": torch.randn(5 * CHUNK // 4 + 3, generator=g),        # ~5 chunks
         "residual": torch.randn(3 * CHUNK // 2, generator=g).to(torch.bfloat16)},
    ]


def _same(a, b):
    return a.keys() == b.keys() and all(
        (torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype and a[k].shape == b[k].shape)
        if isinstance(b[k], torch.Tensor) else a[k] == b[k] for k in b)


def _catch(fn):
    try:
        fn()
        return None
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__, str(exc)


def paths_worker(tag):
    rank = dist.get_rank()
    out = {}

    def group(name="pp", **kw):
        cfg = {"ident": f"{tag}", "chunk_bytes": CHUNK, "timeout": 10.0, **kw}
        return GroupCoordinator([[0, 1]], group_name=name, config=CommConfig(**cfg))

    # backend selection: one group per condition
    split = f"{tag}-node{rank}"                           # two simulated nodes
    for key, kw in {"shm": {}, "names": {"ident": split}, "arch": {"cpu_arch": "POWERPC"},
                    "arm_off": {"cpu_arch": "ARM", "allow_arm": False}, "arm_on": {"cpu_arch": "ARM"},
                    "ops": {"shm_ops_built": False}, "dp": {"name": "dp"}, "tp": {"name": "tp"}}.items():
        g = group(**kw)
        d = g.device_communicator.decision
        out[f"sel/{key}"] = {"path": d.path(), "backend": d.backend, "logs": d.log_lines,
                             "supports": g.device_communicator.supports_tensor_dict,
                             "custom": g.use_cpu_custom_send_recv, "names": d.names_seen}
        g.destroy()

    shm_g, gen_g = group(), group(ident=split)
    # round trips on both paths; the shm result equals the generic one
    ok = []
    for d in _dicts():
        if rank == 0:
            shm_g.send_tensor_dict(d)
            gen_g.send_tensor_dict(d)
        else:
            a, b = shm_g.recv_tensor_dict(), gen_g.recv_tensor_dict()
            ok.append((_same(a, d), _same(b, d), _same(a, b)))
    out["round_trips"] = ok
    # non-tensor values ride in the generic path's metadata
    mixed = {"t": torch.arange(6).reshape(2, 3), "s": "str", "l": [1, "a", (2, 3)], "d": {"k": [1]}, "n": None,
             "e": torch.empty(0, dtype=torch.int8), "b": b"xy"}
    if rank == 0:
        gen_g.send_tensor_dict(mixed)
        out["shm_non_tensor"] = _catch(lambda: shm_g.send_tensor_dict({"x": torch.zeros(2), "note": "s"}))
        out["shm_non_contig"] = _catch(lambda: shm_g.send_tensor_dict({"x": torch.zeros(3, 2).t()}))
        out["shm_too_many"] = _catch(lambda: shm_g.send_tensor_dict({f"t{i}": torch.zeros(1) for i in range(7)}))
    else:
        out["mixed"] = _same(gen_g.recv_tensor_dict(), mixed)
    # the post-#40150 communicator refuses the fast path on the fallback backend
    out["direct_guard"] = _catch(lambda: gen_g.device_communicator.send_tensor_dict({"x": torch.zeros(1)}, 1 - rank))
    # broadcast: in place, and a mismatch raises on every rank instead of corrupting
    t = torch.tensor([1, 2, 3]) if rank == 0 else torch.zeros(3, dtype=torch.int64)
    out["bcast"] = gen_g.broadcast(t, src=0).tolist()
    bad = torch.tensor([1, 2, 3]) if rank == 0 else torch.zeros(3, dtype=torch.int32)
    out["bcast_mismatch"] = _catch(lambda: gen_g.broadcast(bad, src=0))
    out["bcast_after"] = gen_g.broadcast(torch.tensor([7.0]) if rank == 0 else torch.zeros(1), src=0).tolist()
    out["ranks"] = (gen_g.rank_in_group, gen_g.world_size, gen_g.is_first_rank, gen_g.is_last_rank)
    gen_g.barrier()

    # both gates: pre-#40150 trusts the build, post-#40150 asks the communicator
    for gate in ("pre-40150", "post-40150"):
        for where, ident in (("same", tag), ("split", split)):
            g = group(gate=gate, ident=ident)
            d = {"hidden_states": torch.full((2, 3), 1.5)}
            res = _catch(lambda: g.send_tensor_dict(d)) if rank == 0 else _catch(lambda: g.recv_tensor_dict())
            out[f"gate/{gate}/{where}"] = {"custom": g.use_cpu_custom_send_recv, "inputs": g.gate_inputs, "err": res}
            g.barrier()
            g.destroy()
    g = group(gate="pre-40150", shm_ops_built=False)
    out["gate/pre-40150/no-ops"] = g.use_cpu_custom_send_recv
    g.destroy()

    # bounded waits: rank 1 waits for data rank 0 never sends (rank 0 stays alive meanwhile)
    short = {"timeout": 1.0}
    gs, gg = group(**short), group(ident=split, **short)
    if rank == 1:
        for key, g in (("timeout/shm", gs), ("timeout/generic", gg)):
            t0 = time.monotonic()
            out[key] = (_catch(g.recv_tensor_dict), time.monotonic() - t0)
    shm_g.barrier()          # rank 0 stays alive (silent) until rank 1 has seen both waits time out
    shm_g.destroy()
    return out


def test_paths_selection_gates_and_timeouts():
    tag = f"tproc{uuid.uuid4().hex[:6]}"
    r0, r1 = values(launch(paths_worker, 2, args=(tag,), timeout=120))
    assert _listing(tag) == []                            # normal run: nothing left in /dev/shm
    sel = r0
    assert sel["sel/shm"]["backend"] == "shm" and sel["sel/shm"]["supports"] and sel["sel/shm"]["custom"]
    assert sel["sel/shm"]["names"] == [f"{tag}-pp:0-[0-1]-cpushm"] * 2
    fallback = ("INFO CPU SHM communicator disabled for group {}: ranks do not share the same SHM group name, "
                "falling back to torch.distributed.")
    assert sel["sel/names"]["path"].endswith("names_agree=NO -> torch.distributed")
    assert sel["sel/names"]["names"] == [f"{tag}-node0-pp:1-[0-1]-cpushm", f"{tag}-node1-pp:1-[0-1]-cpushm"]
    assert sel["sel/names"]["logs"] == [fallback.format("pp:1")]
    assert sel["sel/arch"]["path"] == ("arch_allowed=NO -> shm_ops_built=skipped -> group_kind_tp_pp=skipped -> "
                                       "names_agree=skipped -> torch.distributed")
    assert sel["sel/arch"]["logs"] == [fallback.format("pp:2")]       # vLLM's elif: misleading but faithful
    assert sel["sel/arm_off"]["path"].startswith("arch_allowed=NO") and sel["sel/arm_on"]["backend"] == "shm"
    assert sel["sel/ops"]["path"].startswith("arch_allowed=yes -> shm_ops_built=NO")
    assert sel["sel/dp"]["path"].startswith("arch_allowed=yes -> shm_ops_built=yes -> group_kind_tp_pp=NO")
    assert sel["sel/dp"]["logs"] == []                    # non tp/pp groups stay silent
    assert sel["sel/tp"]["backend"] == "shm"
    for key in ("names", "arch", "arm_off", "ops", "dp"):
        assert not sel[f"sel/{key}"]["supports"] and not sel[f"sel/{key}"]["custom"], key

    assert r1["round_trips"] == [(True, True, True)] * 3
    assert r1["mixed"] is True
    assert r0["shm_non_tensor"][0] == "ShmPayloadError" and r0["shm_non_tensor"][1].startswith(ONLY_TENSORS)
    assert "'note'" in r0["shm_non_tensor"][1] and "str" in r0["shm_non_tensor"][1]
    assert "not contiguous" in r0["shm_non_contig"][1] and "7 tensors" in r0["shm_too_many"][1]
    for r in (r0, r1):
        assert r["direct_guard"] == ("NotImplementedError", NO_DICT_FASTPATH)
        assert r["bcast"] == [1, 2, 3] and r["bcast_after"] == [7.0]
        assert r["bcast_mismatch"][0] == "BroadcastMismatchError" and "group rank(s) [1]" in r["bcast_mismatch"][1]
    assert r0["ranks"] == (0, 2, True, False) and r1["ranks"] == (1, 2, False, True)

    pre_split = (r0["gate/pre-40150/split"], r1["gate/pre-40150/split"])
    assert all(g["custom"] for g in pre_split)             # build has the ops -> custom path
    assert pre_split[0]["err"] == ("AttributeError", "module 'torch.distributed' has no attribute 'send_tensor_dict'")
    assert pre_split[1]["err"] == ("AttributeError", "module 'torch.distributed' has no attribute 'recv_tensor_dict'")
    for r in (r0, r1):
        assert r["gate/pre-40150/same"] == {"custom": True, "inputs": {"is_cpu": True, "shm_ops_built": True}, "err": None}
        assert r["gate/post-40150/same"]["custom"] and r["gate/post-40150/same"]["err"] is None
        post = r["gate/post-40150/split"]
        assert post["custom"] is False and post["err"] is None
        assert post["inputs"] == {"is_cpu": True, "device_communicator": True, "supports_tensor_dict": False}
        assert r["gate/pre-40150/no-ops"] is False

    for key in ("timeout/shm", "timeout/generic"):
        (etype, msg), took = r1[key]
        assert etype == "TimeoutError", (key, etype, msg)
        assert "group rank 0" in msg and took < 4.0, (key, msg, took)


def killed_worker(tag, path, victim, unlink_after_join):
    rank = dist.get_rank()
    ident = tag if path == "shm" else f"{tag}{rank}"
    g = GroupCoordinator([[0, 1]], group_name="pp", config=CommConfig(
        ident=ident, chunk_bytes=CHUNK, timeout=20.0, unlink_after_join=unlink_after_join))
    assert g.device_communicator.backend == ("shm" if path == "shm" else "torch.distributed")
    payload = {"hidden_states": torch.randn(8 * CHUNK // 4)}  # 8 chunks per message
    g.barrier()
    kill_at = time.monotonic() + 0.4
    if rank == victim:                                     # SIGKILL arrives mid-stream
        threading.Timer(0.4, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    try:
        while True:
            g.send_tensor_dict(payload) if rank == 0 else g.recv_tensor_dict()
    except Exception as exc:  # noqa: BLE001
        return {"type": type(exc).__name__, "is_timeout": isinstance(exc, TimeoutError), "message": str(exc),
                "after_kill": time.monotonic() - kill_at}


@pytest.mark.parametrize("path, victim, unlink_after_join", [
    ("shm", 0, True), ("shm", 1, False), ("generic", 0, True)])
def test_peer_killed_mid_transfer_gives_timeout_error(path, victim, unlink_after_join):
    tag = f"tkill{uuid.uuid4().hex[:6]}"
    res = launch(killed_worker, 2, args=(tag, path, victim, unlink_after_join), timeout=60)
    dead, alive = res[victim], res[1 - victim]
    assert not dead.ok and dead.error_type == "ProcessDied" and dead.exitcode == -signal.SIGKILL
    assert alive.ok, alive.error
    seen = alive.value
    assert seen["is_timeout"] and seen["type"] in ("PeerGoneError", "TimeoutError"), seen
    assert f"group rank {victim}" in seen["message"]
    assert seen["after_kill"] < 5.0, seen
    assert _listing(tag) == []                              # even the killed rank's segment is gone


def leftover_worker(tag):
    g = GroupCoordinator([[0, 1]], group_name="pp", config=CommConfig(ident=tag, unlink_after_join=False))
    names = g.device_communicator.dist_module.channel.segment_names
    assert len(_listing(tag)) == 2 and all(n in _listing(tag) for n in names)
    g.barrier()                                            # both looked before anyone cleans up
    if dist.get_rank() == 0:
        raise ValueError("boom after set-up")              # exception path
    time.sleep(60)                                         # ended by the launcher: SIGTERM path


def test_exception_and_sigterm_paths_unlink():
    tag = f"tleft{uuid.uuid4().hex[:6]}"
    t0 = time.monotonic()
    r0, r1 = launch(leftover_worker, 2, args=(tag,), timeout=60, grace=1.0)
    assert r0.error == {"type": "ValueError", "message": "boom after set-up"}
    assert r1.ended_by_launcher and r1.error_type == "TimeoutError" and "after rank 0 failed" in r1.error_message
    assert time.monotonic() - t0 < 20
    assert _listing(tag) == []


def slow_worker(seconds):
    time.sleep(seconds)
    return dist.get_rank()


def test_launch_ends_overrunning_ranks_and_returns_values():
    assert values(launch(slow_worker, 2, args=(0.0,))) == [0, 1]
    t0 = time.monotonic()
    res = launch(slow_worker, 2, args=(60,), timeout=2.0)
    assert time.monotonic() - t0 < 10
    assert all(r.ended_by_launcher and "did not finish within 2.0s" in r.error_message for r in res)
    with pytest.raises(RuntimeError, match="rank 0: TimeoutError"):
        values(res)


def test_runs_under_torchrun(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           "-m", "explainer.distributed.launch"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(tmp_path)})   # torchrun's own torchelastic_* logs
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "names_agree=yes -> shm" in proc.stdout
    assert "'received': {'hidden_states': [2, 4], 'residual': [2, 4]}" in proc.stdout


def killed_during_setup(tag):
    """Dies by SIGKILL after creating its segment but before any peer learnt the segment's name."""
    shm.ShmGroup(f"{tag}-pp:0-[0]-cpushm", 0, 1, exchange=lambda name: os.kill(os.getpid(), signal.SIGKILL),
                 barrier=lambda: None)


def test_launcher_sweeps_the_segment_of_a_rank_killed_during_setup():
    tag = f"tsweep{uuid.uuid4().hex[:6]}"
    (res,) = launch(killed_during_setup, 1, args=(tag,), timeout=30)
    assert not res.ok and res.exitcode == -signal.SIGKILL
    assert _listing(tag) == []            # SIGKILL runs no handler: only the launcher's sweep removes it
