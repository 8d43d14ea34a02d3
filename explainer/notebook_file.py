"""How the notebooks are stored, so that opening one in JupyterLab and saving it changes nothing.

What JupyterLab 4.6 rewrites in a notebook it opens, and the stored form that leaves it nothing to rewrite
(``normalize``; ``scripts/execute_notebooks.py`` writes it, ``scripts/normalize_notebooks.py`` re-applies it):

- stream outputs: JupyterLab merges consecutive ones of the same name (the kernel splits a cell's prints wherever
  it happens to flush; nbval and the docs site compare and show them merged too);
- a cell's ``collapsed`` and ``jupyter.outputs_hidden``: JupyterLab copies one into the other when it loads the
  cell (``collapsed`` wins), which marks the notebook modified;
- ``metadata.kernelspec``: JupyterLab writes the running kernel's; stored is the one ``ipykernel install --name
  python3`` makes;
- ``metadata.widgets``: only the widget models an output shows, and the models they reference or that reference
  them (a ``jslink`` is a model nothing references); none at all when no output shows a widget;
- numbers: the notebook travels to the server as JavaScript numbers, so a float with an integral value (a
  slider's ``max: 1.0``) comes back as an int (``1``); stored is the int;
- ``metadata.language_info``: when a kernel starts, JupyterLab 4 writes the kernel's ``language_info`` into the
  notebook (``NotebookPanel._updateLanguage``); it marks the notebook modified unless the value equals the stored one
  (``YNotebook.setMetadata`` skips only a deep-equal value). ipykernel reports the interpreter's patch release
  (3.11.2, 3.11.7), so the kernel set-up installs (``explainer.notebook_kernel``) reports ``version`` "3" on every
  Python 3, and so does the stored form (``stored_language_info``).

What only a reviewer sees (a re-execution changes only the cells whose outputs changed):

- widget model ids: the kernel names each model with a random uuid, which JSON stores sorted, so every
  re-execution rewrote and reordered the whole widget state. Stored ids are derived from where the model is
  shown (the cell's id, the output, the path from the shown model), never from the run (``stable_model_ids``);
- nbclient's per-cell ``metadata.execution`` timestamps are not stored.

What JupyterLab would lose: with "Save Widget State Automatically" on, @jupyter-widgets/jupyterlab-manager 5.0
saves only the models that have a live kernel comm, so a notebook saved without running anything keeps none, and
reopened it shows "model not found". Set-up leaves that setting off; ``keep_stored_widgets`` is a jupyter_server
pre-save hook (set-up configures it in the venv) that, whatever the setting, puts back from the file on disk the
stored models that a saved output still shows.

The standard library only: the Jupyter server imports this module.
"""

from __future__ import annotations

import hashlib
import json
import os

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
MODEL_REF = "IPY_MODEL_"                 # how one widget model's state names another (ipywidgets' serializer)
MAX_STORED_BYTES = 256 << 20             # the hook reads the file on disk; larger ones are left alone
LANGUAGE_VERSION = "3"                   # language_info.version stored and reported by the set-up's kernel


def model_refs(obj, found: set[str] | None = None) -> set[str]:
    """Every widget model id that ``obj`` names: ``IPY_MODEL_<id>`` strings and widget views' ``model_id``."""
    found = set() if found is None else found
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if item.startswith(MODEL_REF):
                found.add(item[len(MODEL_REF):])
        elif isinstance(item, dict):
            view = item.get(WIDGET_VIEW)
            if isinstance(view, dict) and isinstance(view.get("model_id"), str):
                found.add(view["model_id"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def shown_models(nb: dict) -> set[str]:
    """The widget models the notebook's outputs show."""
    return model_refs([cell.get("outputs", []) for cell in nb.get("cells", [])])


def widget_models(nb: dict) -> dict:
    """The stored widget models, by id ({} when none are stored)."""
    widgets = nb.get("metadata", {}).get("widgets")
    state = widgets.get(WIDGET_STATE, {}).get("state") if isinstance(widgets, dict) else None
    return state if isinstance(state, dict) else {}


def connected(models: dict, seeds: set[str]) -> dict:
    """The models joined to ``seeds`` by references either way (a view's layout, a jslink to its slider)."""
    edges: dict[str, set[str]] = {mid: set() for mid in models}
    for mid, model in models.items():
        for ref in model_refs(model.get("state", {})) & edges.keys():
            edges[mid].add(ref)
            edges[ref].add(mid)
    keep, todo = set(), [s for s in seeds if s in models]
    while todo:
        mid = todo.pop()
        if mid not in keep:
            keep.add(mid)
            todo.extend(edges[mid] - keep)
    return {mid: models[mid] for mid in models if mid in keep}


def _set_widget_models(nb: dict, models: dict) -> None:
    meta = nb.setdefault("metadata", {})
    if not models:
        meta.pop("widgets", None)
        return
    old = meta.get("widgets", {}).get(WIDGET_STATE, {})
    meta["widgets"] = {WIDGET_STATE: {"state": models, "version_major": old.get("version_major", 2),
                                      "version_minor": old.get("version_minor", 0)}}


def sync_collapsed(metadata: dict) -> None:
    """JupyterLab's rule for a cell it loads: ``collapsed`` wins, else ``jupyter.outputs_hidden`` is copied."""
    if metadata.get("collapsed") is not None:
        metadata.setdefault("jupyter", {})["outputs_hidden"] = metadata["collapsed"]
    elif isinstance(metadata.get("jupyter"), dict) and metadata["jupyter"].get("outputs_hidden") is not None:
        metadata["collapsed"] = metadata["jupyter"]["outputs_hidden"]


def as_javascript_reads_it(obj):
    """``obj`` after a round trip through JavaScript's JSON: integral floats become ints (same value)."""
    if isinstance(obj, float) and obj.is_integer():
        return int(obj)
    if isinstance(obj, dict):
        return {k: as_javascript_reads_it(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [as_javascript_reads_it(v) for v in obj]
    return obj


def coalesce_streams(outputs: list) -> list:
    """One stream output per run of same-name stream outputs (JupyterLab's output area merges them on load)."""
    merged: list = []
    for out in outputs:
        prev = merged[-1] if merged else None
        if (out.get("output_type") == "stream" and prev is not None and prev.get("output_type") == "stream"
                and prev.get("name") == out.get("name")):
            prev["text"] = "".join(prev["text"]) + "".join(out["text"])
        else:
            merged.append(out)
    return merged


def stored_language_info(info: dict) -> dict:
    """``info`` (ipykernel's ``language_info``) as every Python 3 kernel of the set-up reports it."""
    return {**info, "version": LANGUAGE_VERSION}


def _refs_in_order(obj, path: str = ""):
    """(path, model id) for every model ``obj`` names, in an order that depends on ``obj``'s shape only."""
    if isinstance(obj, str):
        if obj.startswith(MODEL_REF):
            yield path, obj[len(MODEL_REF):]
    elif isinstance(obj, dict):
        view = obj.get(WIDGET_VIEW)
        if isinstance(view, dict) and isinstance(view.get("model_id"), str):
            yield path, view["model_id"]
        for key in sorted(obj):
            yield from _refs_in_order(obj[key], f"{path}/{key}")
    elif isinstance(obj, list):
        for i, item in enumerate(obj):
            yield from _refs_in_order(item, f"{path}/{i}")


def _renamed(obj, new: dict):
    """``obj`` with every model reference renamed by ``new`` (old id -> new id); ids not in ``new`` stay."""
    if isinstance(obj, str):
        if obj.startswith(MODEL_REF):
            return MODEL_REF + new.get(obj[len(MODEL_REF):], obj[len(MODEL_REF):])
        return obj
    if isinstance(obj, dict):
        out = {k: _renamed(v, new) for k, v in obj.items()}
        view = out.get(WIDGET_VIEW)
        if isinstance(view, dict) and isinstance(view.get("model_id"), str):
            out[WIDGET_VIEW] = {**view, "model_id": new.get(view["model_id"], view["model_id"])}
        return out
    if isinstance(obj, list):
        return [_renamed(v, new) for v in obj]
    return obj


def _model_id(seed: str) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:32]       # a uuid4's hex length, as the kernel's ids


def stable_model_ids(nb: dict) -> dict:
    """Old id -> new id for every stored model, from where each is shown, never from the run that made it.

    A model an output shows is named after its cell's id and the output's place in the cell; a model another one
    names (a box's child, a view's layout) after that one's new id and the path to the reference; a model that only
    names others (a ``jslink``) after its own content with those names. So a re-execution that shows the same
    widgets stores the same ids, and adding a cell renames nothing outside it.
    """
    models = widget_models(nb)
    new: dict[str, str] = {}
    queue: list[str] = []

    def name(old: str, seed: str) -> None:
        if old in models and old not in new:
            new[old] = _model_id(seed)
            queue.append(old)

    for k, cell in enumerate(nb.get("cells", [])):
        for path, old in _refs_in_order(cell.get("outputs", [])):
            name(old, f"{cell.get('id', f'#{k}')}{path}")
    while True:
        while queue:
            parent = queue.pop(0)
            for path, old in _refs_in_order(models[parent].get("state", {})):
                name(old, f"{new[parent]}{path}")
        rest = [m for m in models if m not in new]
        if not rest:
            return new
        naming = [m for m in rest if any(ref in new for _, ref in _refs_in_order(models[m]))] or rest
        keys = sorted((json.dumps(_renamed(models[m], {o: new.get(o, "?") for _, o in _refs_in_order(models[m])}),
                                  sort_keys=True), m) for m in naming)
        for i, (key, old) in enumerate(keys):
            name(old, f"named-by:{key}:{sum(1 for other, _ in keys[:i] if other == key)}")


def normalize(nb: dict) -> dict:
    """The stored form (see the module's docstring); changes ``nb`` in place and returns it."""
    nb.update(as_javascript_reads_it(nb))
    meta = nb.setdefault("metadata", {})
    meta["kernelspec"] = dict(KERNELSPEC)
    if isinstance(meta.get("language_info"), dict):
        meta["language_info"] = stored_language_info(meta["language_info"])
    for cell in nb.get("cells", []):
        sync_collapsed(cell.setdefault("metadata", {}))
        cell["metadata"].pop("execution", None)
        if cell.get("cell_type") == "code":
            cell["outputs"] = coalesce_streams(cell.get("outputs", []))
    _set_widget_models(nb, connected(widget_models(nb), shown_models(nb)))
    new = stable_model_ids(nb)
    if new:
        for cell in nb.get("cells", []):
            if "outputs" in cell:
                cell["outputs"] = _renamed(cell["outputs"], new)
        _set_widget_models(nb, {new[old]: _renamed(model, new) for old, model in widget_models(nb).items()})
    return nb


def _stored_on_disk(contents_manager, path: str) -> dict | None:
    """The notebook as the file on disk holds it now, or None (no such file, too big, not JSON, outside root)."""
    root = getattr(contents_manager, "root_dir", None)
    if not root or os.path.splitdrive(path)[0] or "\0" in path:
        return None
    root = os.path.realpath(root)
    os_path = os.path.realpath(os.path.join(root, *path.strip("/").split("/")))
    if os.path.commonpath([root, os_path]) != root or not os.path.isfile(os_path):
        return None
    try:
        if os.path.getsize(os_path) > MAX_STORED_BYTES:
            return None
        with open(os_path, encoding="utf-8") as f:
            stored = json.load(f)
    except (OSError, ValueError):
        return None
    return stored if isinstance(stored, dict) else None


def keep_stored_widgets(model: dict, path: str, contents_manager=None, **kwargs) -> None:
    """jupyter_server pre-save hook: the saved notebook keeps every stored widget model its outputs still show.

    Models the saving client sent stay as sent; a model an output shows that the client did not send comes
    back from the file on disk, with what it is joined to; a widget state with no model, where no output shows
    a widget, is not written at all.
    """
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    nb = model["content"]
    sent, shown = widget_models(nb), shown_models(nb)
    missing = shown - sent.keys()
    if missing:
        stored = _stored_on_disk(contents_manager, path) or {}
        back = connected(widget_models(stored), missing)
        if back:
            _set_widget_models(nb, {**back, **sent})
            return
    if not sent:
        _set_widget_models(nb, {})
