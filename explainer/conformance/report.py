"""All conformance rows in one run, and the two ways to print them (``python -m explainer conformance [--json]``)."""

from __future__ import annotations

import sys

from explainer import vllm_env, vllm_release
from explainer.conformance import comm_rows, drift, gate_rows, pins
from explainer.conformance.rows import Row, compare

SECTIONS = (("PP startup gate", gate_rows.rows), ("communicator on this machine", comm_rows.local_rows),
            ("communicator on two hosts", comm_rows.hosts_rows), ("vLLM's source", drift.rows),
            ("the pins the product shows", pins.rows))


def run_all(progress=None, only: str | None = None) -> list[Row]:
    """Every row (or one section's: ``only`` is its title); ``progress(section)`` is called before each section
    (they take seconds to minutes). The last row checks that every vLLM process of the run loaded the same kernel
    library."""
    vllm_env.require()
    rows: list[Row] = []
    for title, section in SECTIONS:
        if only and title != only:
            continue
        if progress:
            progress(title)
        rows.extend(section())
    return rows if only else rows + [one_build_row(rows)]


def builds(rows: list[Row]) -> list[dict]:
    """The kernel libraries the run's vLLM processes reported (build-dependent rows, and the probe's)."""
    return [b for r in rows for b in (r.build, r.vllm.get("kernels")) if isinstance(b, dict) and b.get("library")]


def one_build_row(rows: list[Row]) -> Row:
    """Every vLLM process of the run loaded one library (else the toy was configured unlike some of them)."""
    seen = sorted({(b["library"], b.get("has_shm_ops"), b.get("same_on_every_rank", True)) for b in builds(rows)})
    libs = [{"library": lib, "has_shm_ops": ops, "same_on_every_rank": same} for lib, ops, same in seen]
    return compare("kernels: one library in every vLLM process of this run",
                   {"libraries": 1, "same_on_every_rank": True},
                   {"libraries": len(libs), "same_on_every_rank": all(b["same_on_every_rank"] for b in libs),
                    "seen": libs},
                   ["libraries", "same_on_every_rank"],
                   "the kernel library each vLLM process reported (explainer.vllm_side.kernels: the .so mapped in it)")


def to_json(rows: list[Row]) -> dict:
    found = builds(rows)
    return {"vllm_version": vllm_release.RUNS, "engine": vllm_env.ENGINE_LABEL,
            "kernels": found[0] if found else None, "rows": [r.to_json() for r in rows]}


def all_agree(rows: list[Row]) -> bool:
    """True when no row disagrees (a row this machine cannot run is listed as skipped, not as agreeing)."""
    return all(r.agree is not False for r in rows)


def shown(values: dict, keys: list[str]) -> str:
    if "skipped" in values or "error" in values:
        return str(values.get("skipped") or values.get("error"))
    return "; ".join(f"{k}={values.get(k)}" for k in (keys or list(values)))


def print_table(rows: list[Row], out=sys.stdout) -> None:
    found = builds(rows)
    print(f"conformance: the toy against {vllm_env.ENGINE_LABEL}, {len(rows)} rows", file=out)
    if found:
        print(f"  this machine's vLLM: {vllm_env.build_text(found[0])}; rows marked [build] depend on it and compare "
              f"the toy configured like it", file=out)
    for r in rows:
        mark = {True: "✓ agree", False: "✗ DIFFER", None: "- skipped"}[r.agree]
        print(f"\n{mark}  {r.name}{'  [build]' if r.build else ''}", file=out)
        if "failures" in r.vllm:                         # the pin checker: one line per failure
            print(f"    pins: {r.vllm.get('pins')} of {r.toy.get('pins')} checked, {len(r.vllm['failures'])} failing",
                  file=out)
            for failure in r.vllm["failures"]:
                print(f"    ✗ {failure}", file=out)
            continue
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
