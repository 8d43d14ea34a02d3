"""A JupyterLab server on loopback and a headless Debian Chromium driven by Playwright, for browser tests.

Everything lives under one temp dir (config, data, runtime, IPython, a copy of the notebooks), the
server listens on 127.0.0.1 only, and both processes are ended by their own process id.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage",
                 "--allow-file-access-from-files"]
TOKEN = "explainer-test-token"
REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_lab_settings(data_dir: Path, config_dir: Path, news_off: bool = True, extra: dict | None = None) -> None:
    overrides = {"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"}, **(extra or {})}
    if news_off:      # otherwise the venv's own settings (scripts/setup.sh writes overrides.json) decide
        overrides.update({
            "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
            "@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": False},
        })
    settings = Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings"
    settings.mkdir(parents=True, exist_ok=True)
    # overrides.json is read from the app settings dir; keep ours in the temp tree via JUPYTERLAB_SETTINGS_DIR
    (config_dir / "lab" / "user-settings").mkdir(parents=True, exist_ok=True)
    for plugin, values in overrides.items():
        pkg, name = plugin.split(":")
        target = config_dir / "lab" / "user-settings" / pkg / f"{name}.jupyterlab-settings"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(values))


@contextlib.contextmanager
def jupyter_lab(notebooks: list[Path], timeout: float = 90.0, python: str = sys.executable,
                learner_settings: bool = False, user_settings: dict | None = None):
    """Start JupyterLab on a copy of ``notebooks``; yield (base_url, workdir); stop it by pid.

    ``python``: the interpreter whose environment serves JupyterLab (e.g. the venv ``make lab`` builds).
    ``learner_settings``: keep that environment's own news and widget-state settings instead of the test's.
    ``user_settings``: more user settings, ``{"plugin-id": {key: value}}`` (e.g. the autosave interval).
    """
    root = Path(tempfile.mkdtemp(prefix="explainer-lab-"))
    work = root / "work"
    work.mkdir()
    for nb in notebooks:
        shutil.copy(nb, work / nb.name)
    env = dict(os.environ)
    for var, sub in [("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                     ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython"),
                     ("JUPYTERLAB_SETTINGS_DIR", "config/lab/user-settings"),
                     ("JUPYTERLAB_WORKSPACES_DIR", "workspaces")]:
        env[var] = str(root / sub)
        (root / sub).mkdir(parents=True, exist_ok=True)
    _write_lab_settings(root / "data", root / "config", news_off=not learner_settings, extra=user_settings)
    port = free_port()
    cmd = [python, "-m", "jupyterlab", "--no-browser", "--allow-root",
           "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
           f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={work}",
           "--ServerApp.open_browser=False"] + ([] if learner_settings else ["--LabApp.news_url="])
    log = open(root / "lab.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited early:\n{(root / 'lab.log').read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"jupyter lab did not answer on {base} within {timeout} s")
                time.sleep(0.3)
        yield base, work
    finally:
        with contextlib.suppress(OSError):
            req = urllib.request.Request(f"{base}/api/shutdown?token={TOKEN}", method="POST")
            urllib.request.urlopen(req, timeout=5)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # any kernel it left in its session
        log.close()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def chromium_page(allow_file: bool = False):
    """A Playwright page in Debian's Chromium; every non-loopback request is blocked."""
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="explainer-chromium-")
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True,
                                                    args=CHROMIUM_ARGS, viewport={"width": 1400, "height": 1000})
        try:
            def guard(route):
                url = route.request.url
                ok = url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:", "about:")) or (
                    allow_file and url.startswith("file://"))
                return route.continue_() if ok else route.abort()
            ctx.route("**/*", guard)
            yield ctx.pages[0] if ctx.pages else ctx.new_page()
        finally:
            ctx.close()
            shutil.rmtree(profile, ignore_errors=True)
