"""The room past one machine (deploy/kubernetes): what can be checked without a cluster or an image build.

- the values are valid for the chart they name (Zero to JupyterHub 4.4.0): merged over the chart's own defaults
  and validated against its ``values.schema.json``, as ``helm install`` does, when ``EXPLAINER_Z2JH_CHART`` names
  a folder holding the chart's ``values.yaml`` and ``values.schema.json`` (``helm pull jupyterhub/jupyterhub
  --version 4.4.0 --untar``); without it, the keys used are checked against the chart's documented keys below;
- the values wire the room as on one machine: the room-code sign-in, the board as a service on a port the hub's
  Service and network policy open, the learners' servers told where the board is, limits, the culler;
- the learners' image is environment.yml's environment: the requirements pip would resolve for it (its pip set,
  its conda set by their PyPI names, the hub's JupyterHub release) come from those files; with
  ``EXPLAINER_RESOLVE_IMAGE=1`` (network or a PyPI mirror; minutes) pip resolves them (``--dry-run``);
- ``explainer.hub.kubernetes`` (in the hub's venv only: JupyterHub) configures a hub as the chart's extraConfig
  does, and its authenticator keeps names without making Unix accounts.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy" / "kubernetes"
CHART_VERSION = "4.4.0"
# The chart's top-level keys and the second-level ones these values use (z2jh's configuration reference, 4.4.0).
DOCUMENTED = {
    "hub": {"image", "extraEnv", "extraConfig", "services", "service", "networkPolicy", "concurrentSpawnLimit",
            "loadRoles", "config", "db", "resources"},
    "singleuser": {"image", "defaultUrl", "startTimeout", "memory", "cpu", "storage", "extraEnv", "lifecycleHooks",
                   "networkPolicy", "cmd", "uid", "fsGid", "profileList"},
    "cull": {"enabled", "timeout", "every", "users", "adminUsers", "concurrency", "maxAge", "removeNamedServers"},
    "proxy": {"service", "chp", "https", "secretToken"},
}


def values() -> dict:
    return yaml.safe_load((DEPLOY / "values.yaml").read_text())


def merged(base: dict, over: dict) -> dict:
    """Helm's merge of user values over the chart's defaults (maps merge, everything else replaces)."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def test_the_values_name_the_chart_version_they_are_for():
    text = (DEPLOY / "values.yaml").read_text()
    assert f"--version {CHART_VERSION}" in text and f"k8s-hub:{CHART_VERSION}" in (DEPLOY / "hub.Dockerfile").read_text()


def test_the_values_are_valid_for_the_chart():
    chart = os.environ.get("EXPLAINER_Z2JH_CHART")
    if not chart:
        for top, keys in values().items():
            assert top in DOCUMENTED, f"{top}: not a key of the chart"
            assert set(keys) <= DOCUMENTED[top], f"{top}: {set(keys) - DOCUMENTED[top]} not documented"
        return
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(Path(chart, "values.schema.json").read_text())
    defaults = yaml.safe_load(Path(chart, "values.yaml").read_text())
    jsonschema.validate(merged(defaults, values()), schema)
    broken = merged(values(), {"singleuser": {"memory": {"limt": "2G"}}})      # a typo the schema must refuse
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(merged(defaults, broken), schema)


def test_the_values_wire_the_room_as_on_one_machine():
    v = values()
    hub, single = v["hub"], v["singleuser"]
    assert "from explainer.hub.kubernetes import configure" in hub["extraConfig"]["explainer"]
    board = hub["services"]["board"]
    port = int(board["url"].rsplit(":", 1)[1])
    assert board["command"][-2:] == ["hub", "board"] and board["environment"]["EXPLAINER_HUB_STATE"].startswith(
        "/srv/jupyterhub/")                                                    # the hub's volume: kept on restart
    assert hub["extraEnv"]["EXPLAINER_HUB_STATE"] == board["environment"]["EXPLAINER_HUB_STATE"]
    assert {p["port"] for p in hub["service"]["extraPorts"]} == {port}
    assert [p["port"] for rule in hub["networkPolicy"]["ingress"] for p in rule["ports"]] == [port]
    assert single["extraEnv"]["EXPLAINER_ROOM"] == f"http://hub:{port}/services/board/"
    assert [p["port"] for rule in single["networkPolicy"]["egress"] for p in rule["ports"]] == [port]
    assert single["memory"]["limit"] and single["cpu"]["limit"]
    assert v["cull"]["enabled"] and v["cull"]["timeout"] == 3600


def image_requirements() -> list[str]:
    """What pip resolves for the learners' image: environment.yml's pip set (the checkout for ``-e .``), its conda
    set by PyPI names (python-graphviz is PyPI's graphviz), the JupyterHub release the Dockerfile pins."""
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pypi_name = {"python-graphviz": "graphviz"}
    reqs = []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            for line in dep["pip"]:
                if line.startswith("-e "):
                    reqs.append(str(REPO) + line[3:].strip()[1:])
                elif not line.startswith("-"):
                    reqs.append(line)
        elif not dep.startswith(("python=", "pip")):
            name, _, version = dep.partition("=")
            name = pypi_name.get(name, name)
            major = version.split(".")[0]
            reqs.append(f"{name}=={version}" if "." in version else f"{name}>={major},<{int(major) + 1}" if version
                        else name)
    hub = re.search(r"jupyterhub-singleuser=([0-9.]+)", (DEPLOY / "singleuser.Dockerfile").read_text()).group(1)
    return reqs + [f"jupyterhub=={hub}"]


def test_the_image_is_environment_yml_with_the_hubs_jupyterhub():
    dockerfile = (DEPLOY / "singleuser.Dockerfile").read_text()
    assert "mamba env update -n base -f /opt/explainer/src/environment.yml" in dockerfile
    assert "notebooks/workshop/exercises.ipynb" in dockerfile and "solutions" not in dockerfile.replace(
        "never the solutions", "")
    reqs = image_requirements()
    assert "torch==2.13.0" in reqs and "jupyterhub==5.5.0" in reqs and "graphviz==0.21" in reqs
    assert any(r.startswith(str(REPO)) and r.endswith("[notebooks,hf]") for r in reqs)


@pytest.mark.skipif(os.environ.get("EXPLAINER_RESOLVE_IMAGE") != "1",
                    reason="set EXPLAINER_RESOLVE_IMAGE=1 to resolve the image's requirements with pip (network)")
def test_the_images_requirements_resolve(tmp_path):
    report = tmp_path / "report.json"
    run = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                          "--report", str(report), *image_requirements()], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    got = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}
    assert got["jupyterhub"] == "5.5.0" and got["torch"].startswith("2.13.0") and got["explainer"]


def test_the_hub_pod_config_keeps_names_without_accounts(tmp_path, monkeypatch):
    pytest.importorskip("jupyterhub")
    from traitlets.config import Config

    from explainer.hub import kubernetes
    c = Config()
    kubernetes.configure(c, str(tmp_path / "state"))
    assert c.JupyterHub.authenticator_class is kubernetes.PodRoomCodeAuthenticator
    assert c.Authenticator.admin_users == {"instructor"}
    assert (tmp_path / "state" / "room-code").stat().st_mode & 0o777 == 0o600
    settings = json.loads((tmp_path / "state" / "settings.json").read_text())
    assert settings["board_port"] == kubernetes.BOARD_PORT and settings["extra"]["board_listen"] == "0.0.0.0"
    assert values()["singleuser"]["extraEnv"]["EXPLAINER_ROOM"] == kubernetes.BOARD_URL
    code = (tmp_path / "state" / "room-code").read_text()
    kubernetes.configure(Config(), str(tmp_path / "state"))              # a restarted hub pod: the same room
    assert (tmp_path / "state" / "room-code").read_text() == code

    made = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: made.append(a))
    auth = kubernetes.PodRoomCodeAuthenticator(state_dir=str(tmp_path / "state"))

    class User:
        name = "Ada"
    import asyncio
    asyncio.run(auth.add_user(User()))
    assert "Ada" in auth.learners.by_name and not made                     # no useradd in a pod
    auth.delete_user(User())
    assert "Ada" not in json.loads((tmp_path / "state" / "learners.json").read_text())["learners"]

    spawner = type("S", (), {"environment": {}, "user": User()})()
    kubernetes.seat(spawner)
    assert spawner.environment == {"EXPLAINER_SEAT": "Ada"}
