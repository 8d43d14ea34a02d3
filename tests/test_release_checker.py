"""The release checker (``python -m explainer conformance --release X``): the product's pins read against release X.

On made-up sources it is shown to follow a text by its context, never to the first occurrence elsewhere, and to
refuse a text too common to identify a place. Through the command, a made-up release served by pip from a local
folder is fetched once into the cache and read from its wheel; no network and an unknown release end in one line,
exit 2. Against the real releases: every pin holds in the release that runs here, and in the newest release the
moves the package knows of are found, each at the right place (the four places a first-occurrence hint got wrong).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from explainer import vllm_env, vllm_release
from explainer.conformance import release, vllm_source
from explainer.conformance.places import File
from explainer.errors import UsageError

REPO = Path(__file__).resolve().parents[1]
NEEDS_VLLM = pytest.mark.skipif(vllm_env.missing_reason() is not None, reason=str(vllm_env.missing_reason()))
HOME = """import os


def send(x):
    handle = x.isend()
    handle.wait()
    return handle


def recv(x):
    handle = x.irecv()
    handle.wait()
    return x.buffer
"""


def source(rel: str, files: dict[str, str]) -> vllm_source.Source:
    return vllm_source.Source(rel, f"made-up {rel}", list(files), files.__getitem__)


def repo_with(tmp_path: Path, text: str) -> Path:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "SOURCES.md").write_text(text)
    return tmp_path / "repo"


def results(tmp_path, pins_text: str, home: dict, target: dict) -> dict[str, release.Result]:
    runs = vllm_release.RUNS
    got = release.check_pins(source("9.9.9", target), {runs: source(runs, home)}, repo_with(tmp_path, pins_text))
    return {r.pin: r for r in got}


def test_a_moved_text_is_found_in_its_own_function_not_at_its_first_occurrence(tmp_path):
    runs = vllm_release.RUNS
    moved = HOME.replace("import os\n", "import os\n\n\ndef early(x):\n    handle.wait()\n    handle.wait()\n")
    pin = f"{runs} comm.py:10-12 handle.wait()"
    got = results(tmp_path, f"`{pin}` and `{runs} comm.py:4-7 handle.wait()`", {"comm.py": HOME},
                  {"comm.py": moved})
    assert File(moved).places("handle.wait()")[0].context == "early"          # what a first-occurrence hint picks
    assert (got[pin].status, got[pin].now, got[pin].context) == ("moved", "9.9.9 comm.py:15-17", "recv")
    assert File(moved).places("handle.wait()")[3].first == 17


def test_held_gone_and_refused(tmp_path):
    runs = vllm_release.RUNS
    target = {"comm.py": HOME.replace("def recv(x):", "def receive(x):")}
    text = (f"`{runs} comm.py:4-7 handle.wait()` `{runs} comm.py:10-13 handle.wait()` "
            f"`{runs} gone.py:1 import os` `{runs} comm.py:1-13 handle.wait()` `{runs} comm.py:4-5 handle`")
    got = results(tmp_path, text, {"comm.py": HOME, "gone.py": "import os\n"}, target)
    assert got[f"{runs} comm.py:4-7 handle.wait()"].status == "held"
    gone = got[f"{runs} comm.py:10-13 handle.wait()"]
    assert gone.status == "gone" and gone.now is None
    assert gone.why == "not in recv any more (recv is gone); the text is elsewhere: 6 (send), 12 (receive)"
    assert got[f"{runs} gone.py:1 import os"].why == "gone.py: no such file in vLLM 9.9.9"
    assert got[f"{runs} comm.py:1-13 handle.wait()"].status == "refused"           # twice within its lines
    refused = got[f"{runs} comm.py:4-5 handle"]
    assert refused.status == "refused" and refused.why.startswith("too common: 3 times in send (lines 5, 6, 7)")


def fake_wheel(folder: Path, version: str, files: dict[str, str]) -> Path:
    """A wheel pip accepts from a local folder: vllm-VERSION-py3-none-any.whl with the given vllm/ files."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"vllm-{version}-py3-none-any.whl"
    info = f"vllm-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        for rel, text in files.items():
            z.writestr(f"vllm/{rel}", text)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


def newest_wheel() -> Path:
    """The newest release's wheel in this user's cache (fetched if need be; the test skips without network)."""
    try:
        return vllm_source.fetch(vllm_release.NEWEST)
    except UsageError as exc:
        if str(exc).startswith("no network"):
            pytest.skip(str(exc))
        raise


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]                        # nothing listens there once the socket is closed


def cli(*args, env):
    return subprocess.run([sys.executable, "-m", "explainer", "conformance", *args], capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL, env={**os.environ, **env}, cwd=REPO)


def offline_env(tmp_path: Path, links: Path | None) -> dict[str, str]:
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": "",
           "PIP_EXTRA_INDEX_URL": "", "PIP_INDEX_URL": f"http://127.0.0.1:{closed_port()}/simple"}
    if links is not None:
        env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(links))
    return env


@NEEDS_VLLM
def test_a_release_is_fetched_once_read_from_its_wheel_and_reported_as_one_json_object(tmp_path):
    """A made-up release 9.9.9: the real files of the release that runs here, parallel_state.py three lines down."""
    _, root = vllm_source.installed_release()
    files = {rel: (root / rel).read_text() for rel in (release.DIFFUSION, release.COMMUNICATOR, release.MODEL_CONFIG,
                                                       release.PARALLEL_STATE)}
    files[release.PARALLEL_STATE] = "# one\n# two\n# three\n" + files[release.PARALLEL_STATE]
    links = tmp_path / "links"
    fake_wheel(links, "9.9.9", files)
    env = offline_env(tmp_path, links)
    newest = newest_wheel()                               # pins naming the newest release need its source too
    (tmp_path / "cache" / "explainer" / "vllm-wheels" / newest.parent.name).mkdir(parents=True)
    (tmp_path / "cache" / "explainer" / "vllm-wheels" / newest.parent.name / newest.name).symlink_to(newest)
    proc = cli("--release", "9.9.9", "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert "fetching vllm==9.9.9 with pip" in proc.stderr and report["source"].startswith("the wheel vllm-9.9.9")
    assert sorted(os.listdir(tmp_path / "cache" / "explainer" / "vllm-wheels")) == [newest.parent.name, "vllm-9.9.9"]
    assert {"pin", "release", "status", "now"} <= set(report["pins"][0])
    runs = [p for p in report["pins"] if p["release"] == vllm_release.RUNS]     # the newest's pins: read elsewhere
    for pin in runs:
        if pin["status"] == "moved":
            assert pin["pin"].split()[1].startswith(release.PARALLEL_STATE)
            first = int(pin["pin"].split()[1].split(":")[1].split("-")[0])
            assert pin["now"].split(":")[1].startswith(str(first + 3))
    assert {p["status"] for p in runs if release.PARALLEL_STATE in p["pin"]} == {"moved"}
    names = {Path(rel).name for rel in files}
    for pin in runs:
        assert (pin["status"] == "gone") == (Path(pin["pin"].split()[1].split(":")[0]).name not in names), pin
    pp, comm = report["fixes"]
    assert pp["answer"] is False and comm["answer"] == "isinstance(self.dist_module, _CPUSHMDistributed)"
    assert comm["gate"]["at"] == "9.9.9 distributed/parallel_state.py:577-581"
    assert comm[f"communicator_same_as_{vllm_release.RUNS}"] is True
    shutil.rmtree(links)                                  # the second run reads the cache: no pip, no network needed
    again = cli("--release", "9.9.9", env=env)
    assert again.returncode == 0 and "fetching" not in again.stderr
    assert again.stdout.startswith("conformance --release 9.9.9: vLLM 9.9.9 read from the wheel vllm-9.9.9")


def test_no_network_and_an_unknown_release_are_one_line_exit_2(tmp_path):
    offline = cli("--release", vllm_release.NEWEST, env=offline_env(tmp_path, None))
    assert offline.returncode == 2, offline.stderr
    lines = [ln for ln in offline.stderr.splitlines() if not ln.startswith("conformance: fetching")]
    assert lines == [f"error: no network: pip could not reach the package index to fetch vllm=={vllm_release.NEWEST} "
                     f"(it is cached in {tmp_path / 'cache' / 'explainer' / 'vllm-wheels'} once fetched)"]
    links = tmp_path / "links"
    fake_wheel(links, "9.9.9", {"x.py": ""})
    unknown = cli("--release", "9.9.8", env=offline_env(tmp_path, links))
    assert unknown.returncode == 2 and unknown.stderr.splitlines()[-1] == (
        "error: no vLLM release 9.9.8 on the package index (vllm's newest: 9.9.9)")
    bad = cli("--release", "9.9;rm -rf ~", env=offline_env(tmp_path, links))
    assert bad.returncode == 2 and bad.stderr.strip() == (
        f"error: --release '9.9;rm -rf ~': a vLLM release is written like {vllm_release.NEWEST}")
    assert not (tmp_path / "cache" / "explainer" / "vllm-wheels").exists() or not any(
        (tmp_path / "cache" / "explainer" / "vllm-wheels").iterdir())


def test_a_broken_cached_wheel_is_one_line_saying_what_to_remove(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = tmp_path / "explainer" / "vllm-wheels" / "vllm-9.9.7"
    folder.mkdir(parents=True)
    (folder / "vllm-9.9.7-py3-none-any.whl").write_bytes(b"not a zip")
    with pytest.raises(UsageError, match=r"vllm-9.9.7-py3-none-any.whl is not a readable wheel .*: remove it"):
        vllm_source.source("9.9.7")


def test_a_cache_folder_that_cannot_be_made_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))             # a file where the folder would go
    with pytest.raises(UsageError, match=r"^cannot write the cache folder .*/file/explainer/vllm-wheels: "):
        vllm_source.fetch("9.9.6")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")                     # not absolute: ignored, as XDG says
    assert vllm_source.cache_dir() == Path.home() / ".cache" / "explainer" / "vllm-wheels"


@NEEDS_VLLM
def test_every_pin_holds_in_the_release_that_runs_here():
    report = release.run(vllm_release.RUNS)
    assert report["source"].startswith("the vLLM environment's package")
    runs = [p for p in report["pins"] if p["release"] == vllm_release.RUNS]
    assert len(runs) >= 80 and {p["status"] for p in runs} == {"held"}
    assert release.holds(report) and report["counts"]["refused"] == 0


def newest() -> dict:
    try:
        return release.run(vllm_release.NEWEST)
    except UsageError as exc:
        if str(exc).startswith("no network"):
            pytest.skip(str(exc))
        raise


@NEEDS_VLLM
def test_the_newest_release_moves_what_it_moved_to_the_right_places():
    report = newest()
    by_pin = {p["pin"]: p for p in report["pins"]}
    assert release.holds(report)                      # every pin naming the newest release holds there
    with vllm_source.source(vllm_release.NEWEST) as src:
        check_the_newest_release_moves(report, by_pin, src)


def check_the_newest_release_moves(report: dict, by_pin: dict, src: vllm_source.Source) -> None:
    runs = vllm_release.RUNS

    def now_lines(pin: str) -> list[str]:
        entry = by_pin[pin]
        assert entry["status"] == "moved", entry
        rel, lines = entry["now"].split(" ", 1)[1].split(":")
        a, _, b = lines.partition("-")
        return src.text(rel).splitlines()[int(a) - 1:int(b or a)]

    # the four places a first-occurrence hint got wrong
    recv = now_lines(f"{runs} v1/worker/gpu_worker.py:1313-1325 AsyncIntermediateTensors(")
    assert any("intermediate_tensors = AsyncIntermediateTensors(" in ln for ln in recv)
    sampled = now_lines(f"{runs} model_executor/models/diffusion_gemma.py:1183-1186 self._sampled = torch.zeros("
                        "max_num_reqs, self.canvas_length, dtype=torch.int32")
    assert sampled[0].strip() == "self._sampled = torch.zeros(" and "dtype=torch.int32," in sampled[3]
    for pin, context in ((f"{runs} distributed/parallel_state.py:1109-1116 handle.wait()", "send_tensor_dict"),
                         (f"{runs} distributed/parallel_state.py:1301 if self.use_cpu_custom_send_recv:",
                          "irecv_tensor_dict")):
        entry = by_pin[pin]
        a = int(entry["now"].split(":")[1].split("-")[0])
        scopes = src.file(release.PARALLEL_STATE).scopes
        assert entry["context"] == f"GroupCoordinator.{context}"
        assert any(s.name == entry["context"] and s.first <= a <= s.last for s in scopes), entry
    assert by_pin[f"{runs} distributed/parallel_state.py:1301 if self.use_cpu_custom_send_recv:"]["now"] == (
        f"{vllm_release.NEWEST} distributed/parallel_state.py:1307")
    gate = by_pin[f'{runs} distributed/parallel_state.py:574-578 getattr(self.device_communicator, '
                  f'"supports_tensor_dict", False)']
    assert gate["now"] == f"{vllm_release.NEWEST} distributed/parallel_state.py:580-584"
    # what the newest release removed
    for pin, why in ((f"{runs} v1/executor/ray_executor.py:354-356 get_distributed_init_method(", "no such file"),
                     (f"{runs} v1/worker/cpu_model_runner.py:84-91 self.profile_run()", "no such file"),
                     (f"{runs} config/vllm.py:724-728 Model Runner V2 requires Triton", "use_v2_model_runner is gone"),
                     (f"{runs} v1/worker/gpu/pp_utils.py:152-164 draft_tokens_to_update[draft_idx_mapping] = "
                      "draft_tokens", "not in PPHandler.get_prev_sampled_outputs")):
        assert by_pin[pin]["status"] == "gone" and why in by_pin[pin]["why"], by_pin[pin]
    pp, comm = report["fixes"]
    assert pp["answer"] is False and pp["bases"] == ["nn.Module", "SupportsMultiModal", "SupportsQuant"]
    assert comm["answer"] == "isinstance(self.dist_module, _CPUSHMDistributed)"
    assert comm["gate"]["at"] == f"{vllm_release.NEWEST} distributed/parallel_state.py:580-584"
    assert comm[f"communicator_same_as_{runs}"] is True
    assert report["counts"]["moved"] >= 40 and report["counts"]["refused"] == 0
