"""The notebooks' stored form and the server's pre-save hook (``explainer.notebook_file``).

Every stored notebook is in the form JupyterLab leaves unchanged (the browser round trip itself is
tests/test_lab_opened.py), with widget model ids that depend on where each model is shown, never on the run, and
the language version every Python 3 kernel of the set-up reports (tests/test_notebook_reexecution.py re-executes a
notebook to show what a reviewer's diff holds). The hook runs in a real Jupyter server configured by set-up: a save that carries
no widget state (JupyterLab with "Save Widget State Automatically" on, nothing run) keeps every stored model;
a save after one cell re-ran keeps that cell's new model and the others' stored ones; a notebook without
widgets gets no empty widget state.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from explainer.notebook_file import (KERNELSPEC, LANGUAGE_VERSION, MODEL_REF, WIDGET_STATE, WIDGET_VIEW, connected,
                                     keep_stored_widgets, model_refs, normalize, shown_models, widget_models)
from labserver import REPO, TOKEN, jupyter_lab

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb")) + sorted((REPO / "notebooks" / "workshop").glob("*.ipynb"))
WITH_WIDGETS = REPO / "notebooks" / "03_cpu_communicator.ipynb"
WITHOUT_WIDGETS = REPO / "notebooks" / "workshop" / "exercises.ipynb"


def test_every_stored_notebook_is_in_the_form_jupyterlab_leaves_unchanged():
    out = subprocess.run([sys.executable, "scripts/normalize_notebooks.py", "--check", *map(str, NOTEBOOKS)],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, (f"{out.stdout}re-apply it: python scripts/normalize_notebooks.py "
                                 "notebooks/*.ipynb notebooks/workshop/*.ipynb")


def test_the_stored_widget_state_is_exactly_what_the_outputs_show():
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        models = widget_models(nb)
        assert set(connected(models, shown_models(nb))) == set(models), path.name
        assert shown_models(nb) <= set(models), f"{path.name}: an output shows a widget model that is not stored"
        assert ("widgets" in nb["metadata"]) == bool(models), path.name


def _model(name: str, **state) -> dict:
    return {"model_module": "@jupyter-widgets/controls", "model_module_version": "2.0.0",
            "model_name": name, "state": state}


def _notebook(models: dict, views: list[str], cell_meta: dict | None = None) -> dict:
    outputs = [{"output_type": "display_data", "metadata": {},
                "data": {"text/plain": "w", WIDGET_VIEW: {"model_id": v, "version_major": 2, "version_minor": 0}}}
               for v in views]
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"name": "python3", "display_name": "x"}},
          "cells": [{"cell_type": "code", "id": "c1", "execution_count": 1, "source": "w",
                     "metadata": cell_meta or {}, "outputs": outputs}]}
    if models:
        nb["metadata"]["widgets"] = {WIDGET_STATE: {"state": models, "version_major": 2, "version_minor": 0}}
    return nb


STEPPER = {                                # a slider jslinked to a Stack of two frames, in a VBox; and an orphan
    "box": _model("VBoxModel", children=["IPY_MODEL_slider", "IPY_MODEL_stack"], layout="IPY_MODEL_lay"),
    "lay": _model("LayoutModel"),
    "slider": _model("IntSliderModel", max=1.0, value=0),
    "stack": _model("StackModel", children=["IPY_MODEL_f0", "IPY_MODEL_f1"], selected_index=0),
    "f0": _model("HTMLModel", value="rank 0"),
    "f1": _model("HTMLModel", value="rank 1"),
    "link": _model("LinkModel", source=["IPY_MODEL_slider", "value"], target=["IPY_MODEL_stack", "selected_index"]),
    "orphan": _model("HTMLModel", value="a widget no output shows"),
}


def model_names(nb: dict) -> list[str]:
    return sorted(m["model_name"] for m in widget_models(nb).values())


def test_normalize_keeps_what_the_outputs_show_and_what_jupyterlab_would_rewrite():
    nb = normalize(_notebook(copy.deepcopy(STEPPER), ["box"], {"jupyter": {"outputs_hidden": True}}))
    assert model_names(nb) == sorted(m["model_name"] for k, m in STEPPER.items() if k != "orphan")   # the jslink stays
    slider = next(m for m in widget_models(nb).values() if m["model_name"] == "IntSliderModel")
    assert slider["state"]["max"] == 1 and type(slider["state"]["max"]) is int
    assert nb["metadata"]["kernelspec"] == KERNELSPEC
    assert nb["cells"][0]["metadata"] == {"jupyter": {"outputs_hidden": True}, "collapsed": True}
    assert normalize(copy.deepcopy(nb)) == nb                             # already in the form: unchanged
    wins = normalize(_notebook({}, [], {"collapsed": False, "jupyter": {"outputs_hidden": True}}))
    assert wins["cells"][0]["metadata"] == {"collapsed": False, "jupyter": {"outputs_hidden": False}}
    assert "widgets" not in normalize(_notebook(copy.deepcopy(STEPPER), []))["metadata"]
    split = _notebook({}, [])
    split["cells"][0]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["a\n"]},
                                    {"output_type": "stream", "name": "stdout", "text": "b\n"},
                                    {"output_type": "stream", "name": "stderr", "text": "c\n"}]
    assert [(o["name"], o["text"]) for o in normalize(split)["cells"][0]["outputs"]] == \
        [("stdout", "a\nb\n"), ("stderr", "c\n")]                    # JupyterLab merges a run of one stream


def test_the_hook_puts_back_what_a_save_without_live_widgets_dropped(tmp_path):
    class Contents:
        root_dir = str(tmp_path)
    stored = normalize(_notebook(copy.deepcopy(STEPPER), ["box"]))
    (tmp_path / "n.ipynb").write_text(json.dumps(stored))
    sent = copy.deepcopy(stored)
    sent["metadata"]["widgets"][WIDGET_STATE]["state"] = {}               # saveState on, nothing run
    model = {"type": "notebook", "content": copy.deepcopy(sent)}
    keep_stored_widgets(model, "n.ipynb", Contents())
    assert model["content"] == stored
    for outside in ("../n.ipynb", "/etc/passwd", "a/../../n.ipynb", "n.ipynb\0"):
        escaped = {"type": "notebook", "content": copy.deepcopy(sent)}
        keep_stored_widgets(escaped, outside, Contents())
        assert widget_models(escaped["content"]) == {}, outside      # nothing read from outside the root
    text = {"type": "file", "content": "x", "format": "text"}
    keep_stored_widgets(text, "n.ipynb", Contents())
    assert text == {"type": "file", "content": "x", "format": "text"}


def renamed_run(models: dict, views: list[str], salt: str) -> tuple[dict, list[str]]:
    """The same widgets as another kernel run would name them: every id replaced by a fresh one."""
    new = {old: f"{salt}{k:030x}" for k, old in enumerate(models)}
    text = json.dumps(models)
    for old, mid in new.items():
        text = text.replace(f'"{MODEL_REF}{old}"', f'"{MODEL_REF}{mid}"')
    return {new[k]: v for k, v in json.loads(text).items()}, [new[v] for v in views]


def test_model_ids_depend_on_where_a_model_is_shown_not_on_the_run():
    runs = [normalize(_notebook(*renamed_run(copy.deepcopy(STEPPER), ["box"], salt))) for salt in ("aa", "bb")]
    assert runs[0] == runs[1]                                        # two runs, two uuid sets: one stored form
    nb = runs[0]
    models = widget_models(nb)
    assert not {"box", "slider", "stack", "link"} & set(models)         # renamed, 32 hex digits as the kernel's
    assert all(len(mid) == 32 and int(mid, 16) >= 0 for mid in models)
    assert model_refs([c["outputs"] for c in nb["cells"]]) | {r for m in models.values() for r in model_refs(m)} \
        <= set(models)                                               # every reference renamed with its model
    assert normalize(copy.deepcopy(nb)) == nb
    # a cell added above: the cell below keeps every model id and the same widget state
    added = copy.deepcopy(_notebook(*renamed_run(copy.deepcopy(STEPPER), ["box"], "cc")))
    extra = copy.deepcopy(added["cells"][0])
    extra["id"] = "new-cell"
    extra_models, (view,) = renamed_run({"x": _model("HTMLModel", value="new")}, ["x"], "dd")
    extra["outputs"][0]["data"][WIDGET_VIEW]["model_id"] = view
    added["cells"].insert(0, extra)
    added["metadata"]["widgets"][WIDGET_STATE]["state"].update(extra_models)
    both = normalize(added)
    assert both["cells"][1] == nb["cells"][0]
    assert {k: v for k, v in widget_models(both).items() if k in models} == models
    assert len(widget_models(both)) == len(models) + 1


def test_stored_notebooks_name_the_language_version_every_python_3_kernel_reports():
    for path in NOTEBOOKS:
        info = json.loads(path.read_text())["metadata"]["language_info"]
        assert info["name"] == "python" and info["version"] == LANGUAGE_VERSION, path.name
    for python in sorted({sys.executable, *(p for p in ("/usr/bin/python3",) if Path(p).exists())}):
        # the kernel set-up installs, started as Jupyter starts it, in the interpreter's own kernel_info reply
        code = ("import sys, json; sys.path.insert(0, sys.argv[1]); from explainer.notebook_kernel import NotebookKernel;"
                " print(json.dumps(NotebookKernel.language_info))")
        if subprocess.run([python, "-c", "import ipykernel"], capture_output=True).returncode != 0:
            continue                                                 # Debian's python3 without ipykernel
        out = subprocess.run([python, "-c", code, str(REPO)], capture_output=True, text=True, timeout=60, check=True)
        assert json.loads(out.stdout) == json.loads(NOTEBOOKS[0].read_text())["metadata"]["language_info"], python


# --- the hook in a real Jupyter server, configured by set-up ---------------------------------------------

def _put(base: str, name: str, nb: dict) -> None:
    body = json.dumps({"type": "notebook", "format": "json", "content": nb}).encode()
    req = urllib.request.Request(f"{base}/api/contents/{name}?token={TOKEN}", data=body, method="PUT",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200


@pytest.fixture(scope="module")
def server():
    config = Path(sys.prefix) / "etc" / "jupyter" / "jupyter_server_config.json"
    if "keep_stored_widgets" not in (config.read_text() if config.exists() else ""):
        pytest.skip(f"{config} has no pre-save hook: run the set-up (make setup-test) for this venv")
    with jupyter_lab([WITH_WIDGETS, WITHOUT_WIDGETS], timeout=120) as (base, work):
        yield base, work


def test_a_save_with_no_live_widget_keeps_every_stored_one(server):
    base, work = server
    stored = json.loads(WITH_WIDGETS.read_text())
    sent = copy.deepcopy(stored)
    sent["metadata"]["widgets"][WIDGET_STATE]["state"] = {}
    _put(base, WITH_WIDGETS.name, sent)
    assert json.loads((work / WITH_WIDGETS.name).read_text()) == stored
    assert (work / WITH_WIDGETS.name).read_text() == WITH_WIDGETS.read_text()


def test_a_save_after_one_cell_re_ran_keeps_its_new_model_and_the_others_stored_ones(server):
    base, work = server
    stored = json.loads(WITH_WIDGETS.read_text())
    views = [(i, k) for i, c in enumerate(stored["cells"]) for k, o in enumerate(c.get("outputs", []))
             if WIDGET_VIEW in o.get("data", {})]
    assert len(views) >= 2
    (ci, oi), others = views[0], views[1:]
    sent = copy.deepcopy(stored)
    sent["cells"][ci]["outputs"][oi]["data"][WIDGET_VIEW]["model_id"] = "rerun"
    sent["metadata"]["widgets"][WIDGET_STATE]["state"] = {"rerun": _model("HTMLModel", value="live")}
    _put(base, WITH_WIDGETS.name, sent)
    saved = json.loads((work / WITH_WIDGETS.name).read_text())
    other_ids = {stored["cells"][i]["outputs"][k]["data"][WIDGET_VIEW]["model_id"] for i, k in others}
    assert widget_models(saved)["rerun"]["state"]["value"] == "live"
    assert set(widget_models(saved)) == {"rerun"} | set(connected(widget_models(stored), other_ids))


def test_a_notebook_without_widgets_gets_no_empty_widget_state(server):
    base, work = server
    sent = json.loads(WITHOUT_WIDGETS.read_text())
    sent["metadata"]["widgets"] = {WIDGET_STATE: {"state": {}, "version_major": 2, "version_minor": 0}}
    _put(base, WITHOUT_WIDGETS.name, sent)
    assert (work / WITHOUT_WIDGETS.name).read_text() == WITHOUT_WIDGETS.read_text()
