"""--backend hosts: two network-namespace hosts, one torchrun each (explainer/distributed/hosts.py).

Every test that creates hosts checks afterwards that nothing of its run remains: no namespace named with
this process's pid, no process it started (ranks and torchrun agents, by pid), no shared-memory segment
named after either host's ident in the machine's /dev/shm.
"""

import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from explainer import scenario
from explainer.render import hosts as render_hosts
from explainer.distributed import host_namespaces, hosts

REASON = hosts.unavailable_reason()
needs_hosts = pytest.mark.skipif(REASON is not None, reason=REASON or "")
pytestmark = pytest.mark.slow

PRIVATE = set(hosts.ADDRESSES)


def _alive(pid):
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False


def _assert_nothing_left(pids=(), idents=(), launcher_pid=None):
    assert hosts.our_namespaces(launcher_pid or os.getpid()) == []
    links = subprocess.run(["ip", "-o", "link", "show", "type", "veth"], capture_output=True, text=True,
                           timeout=10).stdout
    assert f"{hosts.NS_PREFIX}{launcher_pid or os.getpid()}-" not in links     # no veth of ours, here or there
    assert [p for p in pids if _alive(p)] == []
    shm = os.listdir("/dev/shm")
    assert [n for n in shm for i in idents if i and n.startswith(f"{i}-")] == []
    assert "host0-marker" not in shm and "host1-marker" not in shm   # the hosts' tmpfs never was the machine's
    workdirs = glob.glob(os.path.join(tempfile.gettempdir(), f"{hosts.WORKDIR_PREFIX}{launcher_pid or os.getpid()}-*"))
    assert workdirs == []                               # the launcher's work folder too


def _hosts_facts(res):
    return res.details["hosts"]["hosts"]


def _check_hosts(res):
    """Each host: own ident (different), only lo + eth0 with its private address, empty private /dev/shm,
    TCP only between the two private addresses; then nothing of the run is left."""
    hs = _hosts_facts(res)
    assert [h["host"] for h in hs] == ["host0", "host1"]
    assert hs[0]["ident"] and hs[1]["ident"] and hs[0]["ident"] != hs[1]["ident"]
    for h in hs:
        assert h["addresses"] == ["lo 127.0.0.1/8", f"eth0 {h['address']}/30"], h["addresses"]
        assert h["dev_shm"] == [f"{h['host']}-marker"]   # only its own launcher's marker: no peer file, no segment
        assert h["gloo_ifname"] == "eth0" and h["master_addr"] == hosts.ADDRESSES[0]
        assert h["tcp"], "the rank held no TCP socket?"
    assert res.details["hosts"]["only_private_addresses"], res.details["hosts"]["tcp_addresses_seen"]
    assert set(res.details["hosts"]["tcp_addresses_seen"]) == PRIVATE   # gloo and the store: exactly the two host addresses
    _assert_nothing_left(idents=[h["ident"] for h in hs])


# ---- refusing where hosts cannot be made -------------------------------------------------------------------
def test_refusal_reasons(monkeypatch):
    monkeypatch.setattr(host_namespaces, "_effective_caps", lambda: 0)
    reason = hosts.unavailable_reason()
    assert "CAP_SYS_ADMIN and CAP_NET_ADMIN" in reason and "\n" not in reason
    monkeypatch.setattr(host_namespaces.sys, "platform", "darwin")
    assert "needs Linux" in hosts.unavailable_reason()


def test_refuses_in_one_line_as_an_ordinary_user():
    if os.geteuid() != 0:
        proc = subprocess.run([sys.executable, "-m", "explainer", "scenario", "comm-inter-node-fixed",
                               "--backend", "hosts"], capture_output=True, text=True, timeout=60)
    else:                                            # drop to nobody with no capabilities
        if subprocess.run(["which", "setpriv"], capture_output=True).returncode:
            pytest.skip("setpriv (util-linux) is missing: cannot drop root for this check")
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                "--bounding-set=-all", sys.executable, "-m", "explainer", "scenario", "comm-inter-node-fixed",
                "--backend", "hosts"]
        from explainer.workshop import jail
        if jail.available()[0]:                      # the workshop jail's read-only binds: their parent folders
            argv = jail.command(argv)                # are 0755, so a checkout in a 0700 folder is readable
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "CAP_SYS_ADMIN" in lines[0] and "not root" in lines[0], proc.stderr
    assert proc.stdout == ""


def test_bad_backend_and_gate_use_exit_2(capsys):
    from explainer.cli import main
    for argv, word in ((["pp1", "--backend", "hosts"], "runs on one node"),
                       (["comm-inter-node-fixed", "--gate", "pre-40150"], "fixes its own gate"),
                       (["pp2-state-sync", "--gate", "1"], "unknown gate"),
                       (["pp2-state-sync", "--gate", "pre-40150"], "needs real PP groups")):
        assert main(["scenario", *argv]) == 2
        err = capsys.readouterr().err
        assert word in err and len(err.strip().splitlines()) == 1, err


# ---- the scenarios: hosts give what processes give -----------------------------------------------------------
@needs_hosts
@pytest.mark.parametrize("name", ["comm-inter-node-pre-fix", "comm-inter-node-fixed"])
def test_comm_scenarios_on_hosts_equal_processes(name):
    t0 = time.monotonic()
    on_hosts = scenario.run(name, "hosts")
    t_hosts = time.monotonic() - t0
    simulated = scenario.run(name, "processes")
    print(f"{name}: hosts {t_hosts:.1f} s, processes {time.monotonic() - t0 - t_hosts:.1f} s")
    assert on_hosts.backend == "hosts" and simulated.backend == "processes"
    for key in ("outcome", "error", "bytes_per_step", "pp_size", "processes_started", "output_text"):
        assert getattr(on_hosts, key) == getattr(simulated, key), key
    for key in ("backend_per_rank", "decision_path_per_rank", "log_lines", "transfers", "gate"):
        assert on_hosts.details[key] == simulated.details[key], key
    errs = [i["error"] for i in on_hosts.details["per_rank"]]
    assert errs == [i["error"] for i in simulated.details["per_rank"]]
    if name.endswith("pre-fix"):                    # issue #37933: both ranks, the torch.distributed module
        assert on_hosts.error == {"type": "AttributeError",
                                  "message": "module 'torch.distributed' has no attribute 'recv_tensor_dict'"}
        assert errs[0]["message"] == "module 'torch.distributed' has no attribute 'send_tensor_dict'"
    else:
        assert on_hosts.outcome == "ok" and on_hosts.details["per_rank"][1]["received_equal"] is True
    _check_hosts(on_hosts)
    _assert_nothing_left(pids=[i["pid"] for i in on_hosts.details["per_rank"]])
    dot = render_hosts.hosts_dot(on_hosts.to_json())
    assert "10.213.15.1/30" in dot and "veth link" in dot and ("✗ AttributeError" in dot) == name.endswith("pre-fix")


@needs_hosts
@pytest.mark.parametrize("name", ["pp2-pre-fix-int64", "pp2-state-sync"])
def test_pp_scenarios_on_hosts_equal_processes(name):
    t0 = time.monotonic()
    on_hosts = scenario.run(name, "hosts")
    t_hosts = time.monotonic() - t0
    simulated = scenario.run(name, "processes")
    print(f"{name}: hosts {t_hosts:.1f} s, processes {time.monotonic() - t0 - t_hosts:.1f} s")
    for key in ("outcome", "error", "output_text", "first_divergence", "bytes_per_step", "pp_size"):
        assert getattr(on_hosts, key) == getattr(simulated, key), key
    assert on_hosts.outcome == ("diverged" if name == "pp2-pre-fix-int64" else "ok")
    for h in _hosts_facts(on_hosts):                # post-#40150: fallback, then the generic path
        assert h["pp_group"]["backend"] == "torch.distributed"
        assert h["pp_group"]["use_cpu_custom_send_recv"] is False
        assert any("CPU SHM communicator disabled for group pp:0" in ln for ln in h["log_lines"])
    _check_hosts(on_hosts)


@needs_hosts
@pytest.mark.parametrize("name", ["pp2-pre-fix-int64", "pp2-state-sync"])
def test_pp_across_hosts_before_40150_fails_as_issue_37933(name):
    one_node = scenario.run(name, "processes", gate="pre-40150")     # one node: SHM, so the old gate holds
    assert one_node.outcome == ("diverged" if name == "pp2-pre-fix-int64" else "ok") and one_node.error is None
    res = scenario.run(name, "hosts", gate="pre-40150")
    assert res.outcome in ("warmup-crash", "runtime-error")
    ranks = {r["rank"]: r for r in res.details["ranks"]}
    assert ranks[0]["type"] == ranks[1]["type"] == "AttributeError"
    assert ranks[0]["message"] == "module 'torch.distributed' has no attribute 'send_tensor_dict'"
    assert ranks[1]["message"] == "module 'torch.distributed' has no attribute 'recv_tensor_dict'"
    for h in _hosts_facts(res):                      # the build-based gate took the custom path anyway
        assert h["pp_group"]["backend"] == "torch.distributed" and h["pp_group"]["use_cpu_custom_send_recv"] is True
    _check_hosts(res)
    json.dumps(res.to_json())                         # the contract's JSON holds


# ---- every exit path leaves nothing ---------------------------------------------------------------------------
def sigkill_on_rank1():
    import torch.distributed as dist
    if dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    t = __import__("torch").zeros(1)
    dist.recv(t, src=1)                               # rank 0 waits for the dead rank: must end, not hang
    return "unreachable"


@needs_hosts
def test_killed_rank_is_reported_and_everything_is_torn_down():
    t0 = time.monotonic()
    run = hosts.HostsRun([], "")
    res = hosts.launch(sigkill_on_rank1, timeout=90, grace=2.0, comm_timeout=15, record=run)
    assert time.monotonic() - t0 < 90
    assert res[1].error_type == "ProcessDied" and "before reporting" in res[1].error_message
    assert res[1].exitcode == -signal.SIGKILL
    assert not res[0].ok                              # its peer failed or was ended; either way bounded
    _assert_nothing_left(pids=[r.pid for r in res] + [h.proc.pid for h in run.hosts])
    assert not os.path.exists(run.workdir)


def test_failing_setup_step_names_the_step_and_removes_what_it_made(monkeypatch):
    if REASON:
        pytest.skip(REASON)
    monkeypatch.setattr(host_namespaces, "ADDRESSES", ("10.213.15.1", "10.213.15.300"))
    with pytest.raises(hosts.HostStepError) as info:
        hosts.create_hosts(2)
    assert info.value.step == "address 10.213.15.300/30 on host1:eth0"
    assert "exited" in str(info.value)
    _assert_nothing_left()


def test_a_host_whose_launcher_fails_names_the_step(monkeypatch):
    if REASON:
        pytest.skip(REASON)
    monkeypatch.setattr(hosts, "SHM_SIZE", "not-a-size")            # the host's tmpfs mount fails
    res = hosts.launch(sum, args=([1, 2],), timeout=60)
    assert [r.error_type for r in res] == ["HostStepError", "HostStepError"]
    assert all("mount a private tmpfs on /dev/shm" in r.error_message for r in res), res[0].error_message
    _assert_nothing_left()


@needs_hosts
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_run_tears_everything_down(sig):
    proc = subprocess.Popen([sys.executable, "-m", "explainer", "scenario", "comm-inter-node-fixed",
                             "--backend", "hosts"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(hosts.our_namespaces(proc.pid)) < 2:
        time.sleep(0.05)
    assert len(hosts.our_namespaces(proc.pid)) == 2, "the run never created its hosts"
    inside = []
    while time.monotonic() < deadline and not inside:          # wait until the hosts run processes
        inside = [p for ns in hosts.our_namespaces(proc.pid) for p in hosts.netns_pids(ns)]
        time.sleep(0.05)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err                  # the CLI's one line, no traceback
    assert [line for line in err.splitlines() if line.strip()] == [err.strip()] and "interrupted" in err
    assert "Traceback" not in err
    _assert_nothing_left(pids=inside, launcher_pid=proc.pid)


@needs_hosts
def test_namespaces_of_a_sigkilled_launcher_are_swept_by_the_next_run():
    proc = subprocess.Popen([sys.executable, "-m", "explainer", "scenario", "comm-inter-node-fixed",
                             "--backend", "hosts"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    inside = []
    while time.monotonic() < deadline and not inside:
        inside = [p for ns in hosts.our_namespaces(proc.pid) for p in hosts.netns_pids(ns)]
        time.sleep(0.05)
    assert inside
    proc.kill()                                       # no teardown runs in the launcher
    proc.wait(10)
    swept = hosts.sweep_stale()                       # what the next run does first
    assert len(swept) == 2 and all(f"-{proc.pid}-" in ns for ns in swept)
    time.sleep(0.5)
    _assert_nothing_left(pids=inside, launcher_pid=proc.pid)


# ---- the stored records and their picture (no root needed) ---------------------------------------------------
from explainer.scenario import hosts_record  # noqa: E402


def test_stored_records_are_two_host_runs_with_the_processes_outcome():
    for name, gate in hosts_record.STORED_RUNS:
        rec = hosts_record.load_stored(name, gate)
        assert rec["backend"] == "hosts" and rec["scenario"] == name
        hs = rec["details"]["hosts"]["hosts"]
        assert [h["address"] for h in hs] == list(hosts.ADDRESSES) and hs[0]["ident"] != hs[1]["ident"]
        assert all("pid" not in i for i in rec["details"].get("per_rank", []))
        assert all(h["netns"].startswith("explainer-PID-RUN-") for h in hs)
        assert [h["dev_shm"] for h in hs] == [["host0-marker"], ["host1-marker"]]
    for name in ("comm-inter-node-pre-fix", "comm-inter-node-fixed"):   # same outcome as processes, today
        stored, now = hosts_record.load_stored(name), scenario.run(name, "processes")
        assert (stored["outcome"], stored["error"]) == (now.outcome, now.error)
        assert stored["details"]["decision_path_per_rank"] == now.details["decision_path_per_rank"]
    pre = hosts_record.load_stored("pp2-state-sync", "pre-40150")
    assert {r["message"] for r in pre["details"]["ranks"]} == {
        "module 'torch.distributed' has no attribute 'send_tensor_dict'",
        "module 'torch.distributed' has no attribute 'recv_tensor_dict'"}
    post = hosts_record.load_stored("pp2-state-sync", "post-40150")
    assert post["outcome"] == "ok" and post["details"]["identical_to_pp1"]
    with pytest.raises(KeyError, match="stored:"):
        hosts_record.load_stored("pp1")


def test_the_stored_shared_ident_run_agrees_on_names_and_fails_on_both_hosts():
    for name, gate in hosts_record.SHARED_IDENT_RUNS:
        rec = hosts_record.load_stored(name, gate)
        assert rec["backend"] == "hosts" and rec["outcome"] == "runtime-error"
        assert rec["details"]["names_agree"] and len(set(rec["details"]["shm_group_names"])) == 1
        assert [p["host"] for p in rec["details"]["per_rank"]] == ["host0", "host1"]
        assert all(p["error"]["message"].startswith("open shm in SHMManager failed. errno: 2")
                   for p in rec["details"]["per_rank"])
        assert all("pid" not in p for p in rec["details"]["per_rank"])


def test_hosts_dot_draws_each_host_the_link_and_the_outcome():
    pre, fixed = hosts_record.load_stored("comm-inter-node-pre-fix"), hosts_record.load_stored("comm-inter-node-fixed")
    dot_pre, dot_fixed = render_hosts.hosts_dot(pre), render_hosts.hosts_dot(fixed)
    for dot, rec in ((dot_pre, pre), (dot_fixed, fixed)):
        assert "cluster_host0" in dot and "cluster_host1" in dot and "h0_eth -> h1_eth" in dot
        for h in rec["details"]["hosts"]["hosts"]:
            assert f"eth0  {h['address']}/30" in dot and f"ident = {h['ident']} " in dot
        assert "CPU SHM communicator disabled for group pp:0" in dot and "/dev/shm: private tmpfs" in dot
        assert dot.count("SHM group names agree: NO (idents differ)") == 2
    assert dot_pre.count("✗ AttributeError") == 3 and "✓" not in dot_pre    # both ranks + the outcome
    assert "use_cpu_custom_send_recv=True" in dot_pre and "use_cpu_custom_send_recv=False" in dot_fixed
    assert "✓ received the dict intact" in dot_fixed and "✓ delivered intact: hidden_states float32" in dot_fixed
    with pytest.raises(ValueError, match="--backend hosts"):
        render_hosts.hosts_dot(scenario.run("pp2-gated", "inprocess").to_json())
    subprocess.run(["dot", "-Tsvg"], input=dot_pre, text=True, check=True, capture_output=True, timeout=30)


def test_a_live_run_says_how_long_it_took_when_and_under_what_load(monkeypatch):
    monkeypatch.setattr(hosts_record, "unavailable_reason", lambda: None)
    monkeypatch.setattr(hosts_record, "run_record", lambda name, gate=None: (time.sleep(0.2), {"scenario": name})[1])
    record, why = hosts_record.live("comm-inter-node-fixed")
    assert why is None and record["scenario"] == "comm-inter-node-fixed"
    m = record["measured"]
    assert 0.2 <= m["seconds"] < 5 and m["at"].endswith(" UTC") and len(m["loadavg"]) == 2
    line = hosts_record.measured_line(record)
    assert line.startswith(f"this run took {m['seconds']:.1f} s (") and m["at"] in line and "load " in line


def test_live_says_why_when_this_kernel_cannot_create_hosts(monkeypatch):
    monkeypatch.setattr(host_namespaces, "_effective_caps", lambda: 0)
    record, why = hosts_record.live("comm-inter-node-fixed")
    assert record is None and "CAP_SYS_ADMIN and CAP_NET_ADMIN" in why
