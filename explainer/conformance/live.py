"""The real vLLM's answer beside a notebook's toy run: run live in ``.venv-vllm``, or recorded from a real run.

``real_vllm(question)`` runs one question on the real vLLM 0.32.0 (a subprocess of ``.venv-vllm``) and returns its
lines, labelled with the engine and version; where that environment is missing (or, for the two hosts, where
namespaces cannot be made) it returns the lines of a recorded real run (``explainer/records/vllm-0.32.0-cpu.json``,
written by ``record()`` from a conformance run, with its date) and one line on how to run it live. The lines hold
only what a re-run reproduces (no pids, ports, idents or timings), so a notebook's stored output can be compared
with a live run. ``show(question)`` prints them.
"""

from __future__ import annotations

import datetime
import json
from importlib import resources

from explainer import vllm_env
from explainer.conformance import comm_rows, gate_rows
from explainer.distributed.host_namespaces import unavailable_reason

RECORD = "vllm-0.32.0-cpu.json"
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
        return gate_rows.llm_values(vllm_env.run_module("probe", "llm-pp2", timeout=400)["llm-pp2"])
    if question in ("comm-one-ident", "comm-two-idents"):
        return comm_rows.vllm_values(comm_rows.vllm_pair("same" if question == "comm-one-ident" else "different",
                                                         "post-40150"))
    if question == "hosts-own-idents":
        return comm_rows.vllm_values(comm_rows.vllm_on_hosts())
    shared = comm_rows.comm_shared.comm_shared_ident_two_hosts("hosts", engine="vllm")
    return {"names_agree": shared.details["names_agree"], "outcome": shared.outcome,
            "errors": [comm_rows.short_error(p["error"]) for p in shared.details["per_rank"]]}


def lines_of(question: str, v: dict) -> list[str]:
    """What a re-run reproduces, as text."""
    if question == "llm-pp2":
        return [f"{v['exception']}: {v['message']}", f"raised in {v['raised_in'].split(':')[0]}, "
                f"{v['worker_processes']} worker processes started"]
    if question == "hosts-shared-ident":
        return [f"SHM group names agree: {v['names_agree']}; outcome: {v['outcome']}"] + [
            f"rank {r}: {e}" for r, e in enumerate(v["errors"])]
    out = [f"rank {r}: dist_module {v['backend'][r]}, supports_tensor_dict {v['supports_tensor_dict'][r]}, "
           f"use_cpu_custom_send_recv {v['use_cpu_custom_send_recv'][r]}" for r in range(2)]
    out += [f"log: {line}" for line in v["log_lines"]]
    return out + [f"the dict arrived intact: {v['delivered']}"]


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
    """Write the recorded real run from a ``conformance --json`` result (the vLLM side of the rows above)."""
    rows = {r["name"]: r["vllm"] for r in conformance_json["rows"]}
    data = {"engine": vllm_env.ENGINE_LABEL, "date": datetime.date.today().isoformat(),
            "made_by": "python -m explainer conformance --json, vLLM side of these rows",
            "rows": {name: rows[name] for name, _ in QUESTIONS.values()}}
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
