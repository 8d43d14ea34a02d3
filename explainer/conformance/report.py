"""All conformance rows in one run, and the two ways to print them (``python -m explainer conformance [--json]``)."""

from __future__ import annotations

import sys

from explainer import vllm_env
from explainer.conformance import comm_rows, drift, gate_rows
from explainer.conformance.rows import Row

SECTIONS = (("PP startup gate", gate_rows.rows), ("communicator on this machine", comm_rows.local_rows),
            ("communicator on two hosts", comm_rows.hosts_rows), ("vLLM's source", drift.rows))


def run_all(progress=None) -> list[Row]:
    """Every row; ``progress(section)`` is called before each section (they take seconds to minutes)."""
    vllm_env.require()
    rows: list[Row] = []
    for title, section in SECTIONS:
        if progress:
            progress(title)
        rows.extend(section())
    return rows


def to_json(rows: list[Row]) -> dict:
    return {"vllm_version": vllm_env.VLLM_VERSION, "engine": vllm_env.ENGINE_LABEL,
            "rows": [r.to_json() for r in rows]}


def all_agree(rows: list[Row]) -> bool:
    """True when no row disagrees (a row this machine cannot run is listed as skipped, not as agreeing)."""
    return all(r.agree is not False for r in rows)


def shown(values: dict, keys: list[str]) -> str:
    if "skipped" in values or "error" in values:
        return str(values.get("skipped") or values.get("error"))
    return "; ".join(f"{k}={values.get(k)}" for k in (keys or list(values)))


def print_table(rows: list[Row], out=sys.stdout) -> None:
    print(f"conformance: the toy against {vllm_env.ENGINE_LABEL}, {len(rows)} rows", file=out)
    for r in rows:
        mark = {True: "✓ agree", False: "✗ DIFFER", None: "- skipped"}[r.agree]
        print(f"\n{mark}  {r.name}", file=out)
        if r.name.startswith("source: "):
            print(f"    quote:  {r.toy.get('quote', '')[:150]}", file=out)
            print(f"    vLLM:   {r.vllm.get('found_at') or r.vllm}", file=out)
            continue
        print(f"    toy:  {shown(r.toy, r.keys)}", file=out)
        print(f"    vLLM: {shown(r.vllm, r.keys)}", file=out)
        if r.how:
            print(f"    how:  {r.how}", file=out)
    bad = [r.name for r in rows if r.agree is False]
    skip = sum(r.agree is None for r in rows)
    print(f"\nconformance: {len(rows) - len(bad) - skip} agree, {len(bad)} differ, {skip} skipped", file=out)
