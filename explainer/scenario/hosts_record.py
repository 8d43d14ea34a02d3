"""Two-host runs kept as records: run one, store it, load it, or say why this machine cannot run one.

A record is a scenario's JSON (``ScenarioResult.to_json()``, as ``scenario NAME --json`` prints it) from ``--backend hosts``, with
``details.hosts`` describing each host (address, ident, private ``/dev/shm``, sockets, log lines).
``storable`` drops what only identifies the machine run (process ids, the temp dir, the launcher pid
inside namespace names); everything else is what the run printed. The notebook draws the stored records
(``explainer/records/two_hosts.json``, written by ``python -m explainer.scenario.hosts_record``) and runs a live one where
the kernel may create hosts.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys
import time
from pathlib import Path

from explainer.distributed.host_namespaces import unavailable_reason
from explainer.scenario.registry import run
from explainer.scenario.stories import (COMM_INTER_NODE_FIXED, COMM_INTER_NODE_PRE_FIX, COMM_SHARED_IDENT_TWO_HOSTS,
                                        PP2_STATE_SYNC)

STORE = Path(__file__).resolve().parents[1] / "records" / "two_hosts.json"   # package data
# (scenario, PP gate): the communicator on its own, then the PP engine with either gate
STORED_RUNS = ((COMM_INTER_NODE_PRE_FIX.name, None), (COMM_INTER_NODE_FIXED.name, None),
               (PP2_STATE_SYNC.name, "pre-40150"), (PP2_STATE_SYNC.name, "post-40150"))
# one ident on both hosts (notebook 5, section 6): both ranks fail while the group is built
SHARED_IDENT_RUNS = ((COMM_SHARED_IDENT_TWO_HOSTS.name, None),)


def key(name: str, gate: str | None = None) -> str:
    return name if gate is None else f"{name}@{gate}"


def storable(record: dict) -> dict:
    """A copy without per-run process ids and temp paths (the rest is the run as it happened)."""
    rec = copy.deepcopy(record)
    details = rec.get("details", {})
    for info in details.get("per_rank", []):
        info.pop("pid", None)
        info.pop("traceback", None)
    for h in details.get("hosts", {}).get("hosts", []):
        h["netns"] = re.sub(r"^explainer-\d+-\d+-", "explainer-PID-RUN-", h["netns"])
        h.get("pp_group", {}).pop("pid", None)
        h["launcher_log"] = [ln for ln in h.get("launcher_log", []) if "/tmp/" not in ln]
    details.get("hosts", {}).pop("seconds", None)
    return rec


def run_record(name: str, gate: str | None = None) -> dict:
    """Run ``name`` on two hosts now (needs root) and return its storable record."""
    return storable(run(name, "hosts", gate=gate).to_json())


def load_stored(name: str, gate: str | None = None, path: Path = STORE) -> dict:
    records = json.loads(Path(path).read_text())
    k = key(name, gate)
    if k not in records:
        raise KeyError(f"no stored two-host run {k!r}; stored: {', '.join(records)}")
    return records[k]


def live(name: str, gate: str | None = None) -> tuple[dict | None, str | None]:
    """(record, None) after a live two-host run, or (None, why this kernel cannot create hosts). A live record
    also says how long the run took, when, and the machine's 1-minute load before and after (``measured``)."""
    why = unavailable_reason()
    if why:
        return None, why
    load, when, start = os.getloadavg()[0], time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), time.monotonic()
    record = run_record(name, gate)
    record["measured"] = {"seconds": round(time.monotonic() - start, 1), "at": when,
                          "loadavg": (round(load, 2), round(os.getloadavg()[0], 2)), "cpus": os.cpu_count()}
    return record, None


def measured_line(record: dict) -> str:
    """How long a live run took, when and under what load: a stored figure means little without it."""
    m = record["measured"]
    before, after = m["loadavg"]
    return f"this run took {m['seconds']:.1f} s ({m['at']}, load {before:.1f} -> {after:.1f} on {m['cpus']} CPUs)"


def store_all(path: Path = STORE) -> dict:
    records = {key(n, g): run_record(n, g) for n, g in STORED_RUNS + SHARED_IDENT_RUNS}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    return records


if __name__ == "__main__":          # python -m explainer.scenario.hosts_record: re-record the stored runs (root)
    reason = unavailable_reason()
    if reason:
        print(f"error: {reason}", file=sys.stderr)
        sys.exit(2)
    for k, rec in store_all().items():
        print(f"{k}: {rec['outcome']}" + (f" ({rec['error']['type']})" if rec.get("error") else ""))
