"""The toy against the real vLLM 0.32.0 (``.venv-vllm``, built by ``make vllm``; ``make test`` builds it).

One ``python -m explainer conformance --json`` run (real vLLM processes and, as root, the two hosts) feeds most
tests: every row agrees, and the rows hold what vLLM itself raised and logged. Without the vLLM environment those
tests skip (saying why) and the commands are shown to stop in one line. The drift detector is shown to fail on a
copy of vLLM's files with one quoted text changed. Nothing may be left behind: namespaces, work folders, segments.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from explainer import vllm_env, vllm_release
from explainer.bench import comm_vllm
from explainer.conformance import comm_rows, drift, live
from explainer.distributed.host_namespaces import unavailable_reason
from explainer.doctor import rows as doctor_rows

NEEDS_VLLM = pytest.mark.skipif(vllm_env.missing_reason() is not None, reason=str(vllm_env.missing_reason()))
PP_MESSAGE = ("Pipeline parallelism is not supported for this model. Supported models implement the `SupportsPP` "
              "interface.")
FALLBACK = ("CPU SHM communicator disabled for group pp:0: ranks do not share the same SHM group name, falling back "
            "to torch.distributed.")


def cli(*args, env=None, timeout=900):
    return subprocess.run([sys.executable, "-m", "explainer", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def leftovers(pid: int | None = None) -> dict:
    """What runs leave behind; namespaces and work folders carry their launcher's pid (``pid``: only that one's,
    since other runs on a shared machine may hold theirs right now)."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout if shutil.which("ip") else ""
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    mine = "" if pid is None else f"{pid}-"
    return {"netns": sorted(ln.split()[0] for ln in netns.splitlines() if ln.startswith(f"explainer-{mine}")),
            "workdirs": sorted(p.name for p in tmp.glob(f"explainer-hosts-{mine}*")),
            "vllm_tmp": sorted(p.name for p in tmp.glob("explainer-vllm-*")),
            "segments": sorted(p for p in os.listdir("/dev/shm") if "cpushm" in p)}


@pytest.fixture(scope="module")
def conformance():
    before = leftovers()
    child = subprocess.Popen([sys.executable, "-m", "explainer", "conformance", "--json"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        out, err = child.communicate(timeout=900)
    finally:
        child.kill()                                       # by its pid, if it is still there
    proc = subprocess.CompletedProcess(child.args, child.returncode, out, err)
    after = leftovers(child.pid)
    now = leftovers()
    for key in ("segments", "vllm_tmp"):                  # not named by pid: only what is new since the start
        after[key] = sorted(set(now[key]) - set(before[key]))
    return proc, json.loads(out) if out.strip().startswith("{") else None, before, after


def row(data, name):
    return next(r for r in data["rows"] if r["name"] == name)


@NEEDS_VLLM
@pytest.mark.slow
def test_every_row_agrees_and_the_command_exits_0(conformance):
    proc, data, _, _ = conformance
    assert data is not None, proc.stderr[-2000:]
    assert data["vllm_version"] == vllm_release.RUNS
    assert {"name", "toy", "vllm", "agree"} <= set(data["rows"][0])
    differ = [r["name"] for r in data["rows"] if r["agree"] is False]
    assert differ == [] and proc.returncode == 0, json.dumps([r for r in data["rows"] if r["agree"] is False])[:3000]
    assert len([r for r in data["rows"] if r["name"].startswith("source: ")]) >= 10


@NEEDS_VLLM
@pytest.mark.slow
def test_the_real_llm_rejects_pp2_with_the_toys_message_and_no_worker(conformance):
    data = conformance[1]
    assert row(data, "PP gate: supports_pp(DiffusionGemmaForConditionalGeneration)")["vllm"]["supports_pp"] is False
    real = row(data, "PP gate: LLM(pipeline_parallel_size=2)")["vllm"]
    assert (real["exception"], real["message"], real["worker_processes"]) == ("NotImplementedError", PP_MESSAGE, 0)
    assert real["raised_in"].startswith("vllm/config/model.py:")
    pre = row(data, "PP gate: the pre-#45828 model (SupportsPP declared again)")["vllm"]
    assert pre["passes_pp_gate"] is True and "Model Runner V1 does not support: diffusion models" in pre["next"]


@NEEDS_VLLM
@pytest.mark.slow
def test_the_real_communicator_chooses_and_falls_back_as_the_toy(conformance):
    """What vLLM chose, on the build this machine has: with the shm ops (_C, _C_AVX512) shared memory on one ident;
    without them (_C_AVX2) the fallback everywhere, its log line blaming the names while the ops were missing."""
    data = conformance[1]
    build = data["kernels"]
    assert build["library"] in ("_C", "_C_AVX512", "_C_AVX2") and build["has_shm_ops"] == (build["library"] != "_C_AVX2")
    comm_rows = [r for r in data["rows"] if r["name"].startswith("communicator: ")]
    assert comm_rows and all(r["depends_on_build"] and r["build"]["library"] == build["library"] for r in comm_rows)
    one = row(data, "communicator: one node (one ident)")
    two = row(data, "communicator: two nodes (two idents)")["vllm"]
    assert two["backend"] == ["torch.distributed"] * 2 and two["log_lines"] == [FALLBACK] and two["delivered"]
    old = row(data, "communicator: the pre-#40150 gate on two idents")["vllm"]
    if build["has_shm_ops"]:
        assert one["vllm"]["backend"] == ["_CPUSHMDistributed"] * 2 and one["vllm"]["use_cpu_custom_send_recv"] == [True] * 2
        assert one["toy"]["shm_ops_built"] == [True, True] and two["fallback_cause"] == ["names_agree"] * 2
        assert old["errors"] == ["AttributeError: module 'torch.distributed' has no attribute 'send_tensor_dict'",
                                 "AttributeError: module 'torch.distributed' has no attribute 'recv_tensor_dict'"]
    else:                                    # no shm ops: the pre-#40150 gate is False too, so #37933 cannot happen
        assert one["vllm"]["backend"] == ["torch.distributed"] * 2 and one["vllm"]["log_lines"] == [FALLBACK]
        assert one["toy"]["shm_ops_built"] == [False, False] and one["vllm"]["fallback_cause"] == ["shm_ops_built"] * 2
        assert "never compared (they agree)" in one["vllm"]["really_failed"][0] and old["delivered"] is True


@NEEDS_VLLM
@pytest.mark.slow
@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_one_ident_on_two_hosts_fails_on_both_engines_and_nothing_is_left(conformance):
    """One ident on two hosts: with the shm ops both engines pick shared memory and fail with errno 2; without them
    (_C_AVX2) both fall back and deliver, and vLLM's line blames the names, which agree."""
    _, data, before, after = conformance
    shared = row(data, "communicator: two hosts sharing one ident")
    assert shared["agree"] is True and shared["depends_on_build"] is True
    for side in ("toy", "vllm"):
        assert shared[side]["names_agree"] is True
        if data["kernels"]["has_shm_ops"]:
            assert shared[side]["outcome"] == "runtime-error" and shared[side]["log_lines"] == []
            assert shared[side]["errors"] == ["RuntimeError: open shm in SHMManager failed. errno: 2"] * 2
        else:
            assert shared[side]["outcome"] == "ok" and shared[side]["log_lines"] == [FALLBACK]
            assert shared[side]["fallback_cause"] == ["shm_ops_built"] * 2
    assert row(data, "communicator: two hosts (own idents)")["agree"] is True
    assert after == {"netns": [], "workdirs": [], "vllm_tmp": [], "segments": []}


@NEEDS_VLLM
@pytest.mark.slow
def test_on_the_avx2_build_vllm_falls_back_and_the_toy_configured_like_it_agrees(conformance, monkeypatch):
    """The build this machine does not load: EXPLAINER_VLLM_ISA=avx2 makes vLLM's own import_kernels pick _C_AVX2.
    One ident: no shm ops, so both ranks fall back and log the line about the names; the toy with shm_ops=False says
    the same, and the live cell's lines that hold on every build are the stored ones."""
    if not conformance[1]["kernels"]["has_shm_ops"]:
        pytest.skip("this machine's vLLM loads _C_AVX2 already: the conformance run above is the AVX2 one")
    monkeypatch.setenv(vllm_env.ISA_ENV, "avx2")
    rows = comm_rows.local_rows()[:1]                     # "one node (one ident)": the row the build changes most
    one = rows[0].to_json()
    assert one["agree"] is True and one["build"]["library"] == "_C_AVX2" and one["build"]["has_shm_ops"] is False
    assert one["vllm"]["backend"] == ["torch.distributed"] * 2 and one["vllm"]["log_lines"] == [FALLBACK]
    avx2 = live.lines_of("comm-one-ident", one["vllm"])
    stored = live.lines_of("comm-one-ident", live.recorded()["rows"]["communicator: one node (one ident)"])
    assert avx2[0].startswith("this build: kernel library _C_AVX2") and stored[0] != avx2[0]
    assert every_build(avx2) == every_build(stored) != []


def test_conformance_without_the_vllm_env_is_one_line_exit_2(tmp_path):
    proc = cli("conformance", env={"EXPLAINER_VLLM_VENV": str(tmp_path / "none")}, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "make vllm" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args, needle", [
    (["--backend", "hosts", "--engine", "vllm"], "make vllm"),
    (["--backend", "hosts", "--engine", "jax"], "unknown engine"),
    ([], "--backend hosts"),
])
def test_shared_ident_scenario_bad_input_is_one_line_exit_2(tmp_path, args, needle):
    proc = cli("scenario", "comm-shared-ident-two-hosts", *args, env={"EXPLAINER_VLLM_VENV": str(tmp_path / "none")},
               timeout=120)
    assert proc.returncode == 2 and needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_engine_is_refused_on_a_scenario_that_runs_the_toy_only():
    proc = cli("scenario", "comm-same-node", "--engine", "vllm", timeout=120)
    assert proc.returncode == 2 and "--engine applies to comm-shared-ident-two-hosts" in proc.stderr


@NEEDS_VLLM
def test_the_drift_detector_names_the_file_and_the_difference(tmp_path):
    real = drift.vllm_root()
    fake = tmp_path / "lib" / "python3.11" / "site-packages" / "vllm"
    for q in drift.quotes():
        (fake / q.file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(real / q.file, fake / q.file)
    log = fake / "distributed/device_communicators/cpu_communicator.py"
    log.write_text(log.read_text().replace("the same SHM group name", "a different SHM group name"))
    (tmp_path / ".explainer-vllm-0").touch()
    os.environ["EXPLAINER_VLLM_VENV"] = str(tmp_path)
    try:
        rows = {r.name: r for r in drift.rows()}
    finally:
        del os.environ["EXPLAINER_VLLM_VENV"]
    bad = rows["source: the communicator's fallback log line"]
    assert bad.agree is False and bad.vllm["file"] == "vllm/distributed/device_communicators/cpu_communicator.py"
    assert "a different SHM group name" in bad.vllm["closest"] and bad.vllm["difference"]
    assert all(r.agree for n, r in rows.items() if n != bad.name)


def test_locate_names_the_quotes_own_line_not_the_blank_line_above_it():
    lines = ["x = 1", "", "    assert y.dtype == torch.int64", ""]
    assert drift.locate(drift.Quote("q", "f.py", "assert y.dtype == torch.int64", "toy"), lines) == 3


def test_normalize_ignores_layout_only():
    src = 'x = (\n    a\n    and getattr(b, "c", False)\n)\nmsg = ("one "\n       "two")'
    assert drift.normalize(src) == 'x = (a and getattr(b, "c", False)) msg = ("one two")'
    assert drift.normalize("f(a,\n  b)") != drift.normalize("f(a, c)")


@NEEDS_VLLM
@pytest.mark.slow
def test_vllms_channel_under_the_bench_harness_gives_named_rows():
    peer = comm_vllm.measure(quick=True)
    assert isinstance(peer, dict), peer
    toy = {"latency": {"shm": 1e-5, "generic": 1e-3},
           "throughput": {p: {s: 1e9 for s in comm_vllm.SIZES} for p in ("shm", "generic")}}
    rows = comm_vllm.rows(toy, peer)
    measured = [r for r in rows if r.baseline]
    assert all("vLLM" in r.name for r in rows) and all(r.ratio > 0 and r.baseline > 0 for r in measured)
    assert {"4 KiB", "64 KiB", "1 MiB", "16 MiB"} <= {lbl for r in rows for lbl in ("4 KiB", "64 KiB", "1 MiB", "16 MiB")
                                                       if lbl in r.name}
    if peer["kernels"]["has_shm_ops"]:
        assert len(rows) == len(measured) == 10
    else:                                                # _C_AVX2: one short named row instead of vLLM's C++ channel
        assert len(measured) == 5 and rows[0].name == f"vLLM {vllm_release.RUNS} C++ shm: not measured (_C_AVX2 has no shm ops)"


def test_a_bench_row_that_could_not_measure_vllm_stays_short():
    why = "AssertionError: " + "{'rank': 0, 'choice': {'shm': {...}}} " * 30
    (r,) = comm_vllm.rows({}, why)
    assert r.name.startswith(f"vLLM {vllm_release.RUNS} channel: not measured (AssertionError: ") and len(r.name) < 110


def test_doctor_shows_the_missing_vllm_env_as_optional(tmp_path):
    proc = cli("doctor", env={"EXPLAINER_VLLM_VENV": str(tmp_path / "none"), "PYTHONIOENCODING": "utf-8"}, timeout=180)
    line = next(ln for ln in proc.stdout.splitlines() if doctor_rows.VLLM_CHECK in ln)
    assert line.startswith("✗") and "make vllm" in line and proc.returncode == 0, proc.stdout


@NEEDS_VLLM
@pytest.mark.slow
def test_the_recorded_real_run_is_what_the_real_vllm_says_now(conformance):
    """The notebooks' recorded vLLM lines (shown where .venv-vllm is missing) equal this run's, question by question:
    all of them on the recorded build, the lines that hold on every build on another."""
    data = conformance[1]
    rows = {r["name"]: {"build": data["kernels"], **r["vllm"]} for r in data["rows"]}
    rec = live.recorded()
    assert rec["engine"] == vllm_release.ENGINE_LABEL and rec["date"] and rec["kernels"]["library"] in vllm_env.KERNEL_LIBRARIES
    same_build = rec["kernels"]["library"] == data["kernels"]["library"]
    for question, (name, needs_hosts) in live.QUESTIONS.items():
        if needs_hosts and unavailable_reason() is not None:
            continue
        then, now = live.lines_of(question, rec["rows"][name]), live.lines_of(question, rows[name])
        assert (then == now) if same_build else (every_build(then) == every_build(now)), question


def every_build(lines: list[str]) -> list[str]:
    """The lines of ``live.lines_of`` outside the build's own block (what nbval compares)."""
    return [ln for ln in lines[1:] if not ln.startswith("  ")] if any(ln == "holds on every build:" for ln in lines) \
        else lines[1:]


def test_the_notebooks_compare_the_lines_every_build_shares_and_name_the_build():
    """nbval's sanitizer hides the body of the build's own block, so a stored _C output compares equal with a live
    _C_AVX2 run; a change in a line that holds on every build still shows, and the header names the library."""
    import re
    cfg = (Path(__file__).parent / "nbval" / "sanitize.cfg").read_text()
    patterns = re.findall("^regex: (.*)$\n^replace: (.*)$", cfg, flags=re.MULTILINE)

    def shown(v: dict, recorded: bool) -> str:
        head = f"{vllm_release.ENGINE_LABEL}, " + ("recorded on 2026-12-02 (not run here: x):" if recorded else
                                         "ran live in .venv-vllm when this cell ran:")
        text = "\n".join([head] + [f"  {ln}" for ln in live.lines_of("comm-one-ident", v)]) + "\n"
        for regex, replace in patterns:
            text = re.sub(regex, replace, text)
        return text
    shm = {"backend": ["_CPUSHMDistributed"] * 2, "supports_tensor_dict": [True] * 2, "use_cpu_custom_send_recv":
           [True] * 2, "log_lines": [], "fallback_cause": [None, None], "really_failed": [None, None], "delivered": True,
           "build": {"library": "_C", "has_shm_ops": True}}
    avx2 = {**shm, "backend": ["torch.distributed"] * 2, "supports_tensor_dict": [False] * 2,
            "use_cpu_custom_send_recv": [False] * 2, "log_lines": [FALLBACK], "fallback_cause": ["shm_ops_built"] * 2,
            "really_failed": ["this build has no shared-memory ops"] * 2, "build": {"library": "_C_AVX2",
                                                                                   "has_shm_ops": False}}
    assert "kernel library _C (AVX-512 with BF16)" in live.lines_of("comm-one-ident", shm)[0]
    assert shown(shm, recorded=True) == shown(avx2, recorded=False)
    assert shown(shm, recorded=True) != shown({**avx2, "delivered": False}, recorded=False)


def test_without_the_vllm_env_the_recorded_run_is_shown_and_says_how_to_run_it(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLAINER_VLLM_VENV", str(tmp_path / "none"))
    lines = live.real_vllm("llm-pp2")
    assert lines[0].startswith(f"{vllm_release.ENGINE_LABEL}, recorded on ") and "make vllm" in lines[0]
    assert lines[1] == "  this build: kernel library _C (AVX-512 with BF16), has the shared-memory ops"
    assert lines[2] == f"  NotImplementedError: {PP_MESSAGE}"


@pytest.mark.slow
@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_shared_ident_scenario_json_on_the_toy_and_nothing_left_behind():
    before = leftovers()["segments"]
    child = subprocess.Popen([sys.executable, "-m", "explainer", "scenario", "comm-shared-ident-two-hosts", "--backend",
                              "hosts", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = child.communicate(timeout=300)
    finally:
        child.kill()
    proc = subprocess.CompletedProcess(child.args, child.returncode, out, err)
    data = json.loads(out)
    assert proc.returncode == 0 and data["scenario"] == "comm-shared-ident-two-hosts" and data["backend"] == "hosts"
    assert data["outcome"] == "runtime-error" and data["error"]["type"] == "RuntimeError"
    assert data["details"]["engine"] == "toy" and data["details"]["names_agree"] is True
    hosts = {h["host"]: h["dev_shm"] for h in data["details"]["hosts"]["hosts"]}
    assert hosts == {"host0": ["host0-marker"], "host1": ["host1-marker"]}     # neither sees the other's /dev/shm
    assert "#46716" in data["details"]["proposal"]
    left = leftovers(child.pid)
    assert (left["netns"], left["workdirs"], sorted(set(left["segments"]) - set(before))) == ([], [], [])


@NEEDS_VLLM
def test_the_vllm_kernel_is_offered_beside_the_default_one_without_shadowing_it():
    """``make lab`` adds the vLLM venv's kernel folder to JupyterLab's path: a second kernel, the default untouched."""
    folder = vllm_env.venv_dir() / "jupyter-kernel" / "share" / "jupyter"
    out = subprocess.run([str(Path(sys.executable).parent / "jupyter"), "kernelspec", "list", "--json"],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "JUPYTER_PATH": str(folder)})
    specs = json.loads(out.stdout)["kernelspecs"]
    assert specs[vllm_release.KERNEL_NAME]["spec"]["display_name"] == vllm_release.KERNEL_DISPLAY
    vllm_python = os.path.abspath(vllm_env.python())      # venv pythons are symlinks to one interpreter: no resolve
    assert os.path.abspath(specs[vllm_release.KERNEL_NAME]["spec"]["argv"][0]) == vllm_python
    assert str(vllm_env.venv_dir()) not in specs["python3"]["resource_dir"] and os.path.abspath(specs["python3"]["spec"]["argv"][0]) != \
        vllm_python
