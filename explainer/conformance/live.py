"""The real vLLM's answer beside a notebook's toy run: run live in ``.venv-vllm``, or recorded from a real run.

``real_vllm(question)`` runs one question on the real vLLM (a subprocess of ``.venv-vllm``) and returns its
lines, labelled with the engine and version, and naming the kernel library vLLM loaded, since some answers depend
on it (``lines_of``). Where that environment is missing (or, for the two hosts, where namespaces cannot be made) it
returns the lines of a recorded real run (``explainer/records/vllm-0.32.0-cpu.json``, written by
``python -m explainer.conformance.live record``, with its date and library) and one line on how to run it live.
The lines hold only what a re-run reproduces (no pids, ports, idents or timings), so a notebook's stored output can
be compared with a live run. ``show(question)`` prints them.
"""

from __future__ import annotations

import datetime
import json
import sys
from importlib import resources

from explainer import vllm_env, vllm_release
from explainer.conformance import comm_rows, gate_rows, report
from explainer.distributed.host_namespaces import unavailable_reason

RECORD = f"vllm-{vllm_release.RUNS}-cpu.json"
QUESTIONS = {   # question -> (conformance row name, needs the two hosts)
    "llm-pp2": ("PP gate: LLM(pipeline_parallel_size=2)", False),
    "comm-one-ident": ("communicator: one node (one ident)", False),
    "comm-two-idents": ("communicator: two nodes (two idents)", False),
    "hosts-own-idents": ("communicator: two hosts (own idents)", True),
    "hosts-shared-ident": ("communicator: two hosts sharing one ident", True),
}


def run_now(question: str) -> dict:
    """The vLLM side of one conformance row, run now."""
    if question == "llm-pp2":
        probe = vllm_env.run_module("probe", "llm-pp2", timeout=400)
        return {**gate_rows.llm_values(probe["llm-pp2"]), "build": probe.get("kernels")}
    if question in ("comm-one-ident", "comm-two-idents"):
        return comm_rows.vllm_values(comm_rows.vllm_pair("same" if question == "comm-one-ident" else "different",
                                                         "post-40150"))
    if question == "hosts-own-idents":
        return comm_rows.vllm_values(comm_rows.vllm_on_hosts())
    return comm_rows.shared_values(comm_rows.comm_shared.comm_shared_ident_two_hosts("hosts", engine="vllm"))


# Per question, the parts of vLLM's answer that depend on its kernel library (the others hold on every build).
BUILD_DEPENDENT = {"llm-pp2": set(), "comm-one-ident": {"ranks", "log", "really"}, "comm-two-idents": {"really"},
                   "hosts-own-idents": {"really"}, "hosts-shared-ident": {"outcome", "errors", "log", "really"}}


def parts_of(question: str, v: dict) -> dict[str, list[str]]:
    """vLLM's answer as text, part by part; what a re-run reproduces (no pids, ports, idents or timings)."""
    if question == "llm-pp2":
        return {"error": [f"{v['exception']}: {v['message']}", f"raised in {v['raised_in'].split(':')[0]}, "
                          f"{v['worker_processes']} worker processes started"]}
    really = [ln for ln in dict.fromkeys(v.get("really_failed") or []) if ln]
    parts = {"log": [f"log: {line}" for line in v["log_lines"]],
             "really": [f"what really failed: {ln}" for ln in really] if v["log_lines"] else []}
    if question == "hosts-shared-ident":
        return {"names": [f"SHM group names agree: {v['names_agree']}"], "outcome": [f"outcome: {v['outcome']}"],
                "errors": [f"rank {r}: {e}" for r, e in enumerate(v["errors"]) if e], **parts}
    chosen = [b == comm_rows.SHM_BACKEND for b in v["backend"]]
    rule = chosen == [c is None for c in v.get("fallback_cause") or [False] * len(chosen)]
    return {"ranks": [f"rank {r}: dist_module {v['backend'][r]}, supports_tensor_dict {v['supports_tensor_dict'][r]}, "
                      f"use_cpu_custom_send_recv {v['use_cpu_custom_send_recv'][r]}" for r in range(2)],
            **parts, "delivered": [f"the dict arrived intact: {v['delivered']}"],
            "rule": [f"shared memory chosen exactly where all four conditions held: {rule}"]}


def lines_of(question: str, v: dict) -> list[str]:
    """The build's line and the lines that depend on it, indented under it; then the lines that hold on every build.
    nbval compares the second block and hides the first one's body (tests/nbval/sanitize.cfg): a notebook's stored
    output made on one build compares with a live run on another, and still names the build that made it."""
    parts = parts_of(question, v)
    mine = [ln for key, lines in parts.items() if key in BUILD_DEPENDENT[question] for ln in lines]
    every = [ln for key, lines in parts.items() if key not in BUILD_DEPENDENT[question] for ln in lines]
    return ([f"this build: {vllm_env.build_text(v.get('build'))}"] + [f"  {ln}" for ln in mine]
            + (["holds on every build:"] if mine else []) + [f"  {ln}" if mine else ln for ln in every])


def recorded() -> dict:
    return json.loads(resources.files("explainer").joinpath("records", RECORD).read_text())


def real_vllm(question: str) -> list[str]:
    """The real vLLM's answer to ``question`` (one of ``QUESTIONS``), labelled; live when it can run here."""
    name, needs_hosts = QUESTIONS[question]
    why = vllm_env.missing_reason() or (unavailable_reason() if needs_hosts else None)
    if why is None:
        header = f"{vllm_env.ENGINE_LABEL}, ran live in .venv-vllm when this cell ran:"
        return [header] + [f"  {ln}" for ln in lines_of(question, run_now(question))]
    rec = recorded()
    return ([f"{vllm_env.ENGINE_LABEL}, recorded on {rec['date']} (not run here: {why}):"]
            + [f"  {ln}" for ln in lines_of(question, rec["rows"][name])])


def show(question: str) -> None:
    print("\n".join(real_vllm(question)))


def record(conformance_json: dict, path) -> None:
    """Write the recorded real run from a ``conformance --json`` result (the vLLM side of the rows above, each with
    the kernel library it ran on)."""
    rows = {r["name"]: {"build": conformance_json.get("kernels"), **r["vllm"]} for r in conformance_json["rows"]}
    data = {"engine": vllm_env.ENGINE_LABEL, "date": datetime.date.today().isoformat(),
            "kernels": conformance_json.get("kernels"),
            "made_by": "python -m explainer.conformance.live record (conformance --json, vLLM side of these rows)",
            "rows": {name: rows[name] for name, _ in QUESTIONS.values()}}
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")


def main(argv: list[str]) -> int:
    """``python -m explainer.conformance.live record``: run every conformance row, rewrite the recorded real run."""
    if argv != ["record"]:
        print("usage: python -m explainer.conformance.live record", file=sys.stderr)
        return 2
    data = report.to_json(report.run_all(lambda title: print(f"conformance: {title} ...", file=sys.stderr)))
    if any(r["agree"] is False for r in data["rows"]):
        print("live: some rows differ; the record is not written", file=sys.stderr)
        return 1
    record(data, resources.files("explainer").joinpath("records", RECORD))
    print(f"live: wrote explainer/records/{RECORD} ({vllm_env.build_text(data['kernels'])})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
