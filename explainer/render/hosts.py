"""Draw a two-host run (``--backend hosts``) as graphviz DOT: pure function of the run's record.

``hosts_dot(record)`` takes a scenario record (``ScenarioResult.to_json()``, or a stored one from
``explainer.scenario.hosts_record``) and draws, top-down: each host as a box with its address on ``eth0``, its
private ``/dev/shm`` (what the rank saw there), its torchrun node rank and vLLM ident, the backend its
PP group chose and the tensor-dict path its gate took; the veth link between the hosts; the hand-off
rank 0 -> rank 1 with the error or the delivered dict; and the log lines. Every colour is paired with a
word or a symbol (✓ delivered, ✗ error), so the picture reads without colour.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

OK_FILL, BAD_FILL, HOST_FILL, NOTE_FILL = "#e8f1fb", "#fbe3d6", "#f7f7f7", "#ffffff"
OK_LINE, BAD_LINE = "#1f5fa8", "#b3471d"


def _q(s: Any) -> str:
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\l") + '"'


def _wrap(text: str, width: int = 54) -> str:
    words, lines, cur = str(text).split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}".strip()
    return "\n".join(lines + [cur]) + "\n"


def rank_views(record: Mapping) -> list[dict]:
    """Per rank: host facts plus what the rank chose and what happened to it (comm and PP records alike)."""
    details = record.get("details", {})
    hosts = details.get("hosts", {}).get("hosts", [])
    per_rank = {i.get("rank"): i for i in details.get("per_rank", [])}          # comm scenarios
    failed = {r["rank"]: r for r in details.get("ranks", [])}                   # PP scenarios
    views = []
    for h in hosts:
        r = h["rank"]
        comm = per_rank.get(r, {})
        pp = h.get("pp_group") or {}
        backend = comm.get("backend") or pp.get("backend")
        custom = comm.get("use_cpu_custom_send_recv", pp.get("use_cpu_custom_send_recv"))
        err = comm.get("error") or ({"type": failed[r]["type"], "message": failed[r]["message"]} if r in failed else None)
        views.append({**h, "backend": backend, "custom": custom,
                      "gate": comm.get("gate") or pp.get("gate") or details.get("comm_gate") or details.get("gate"),
                      "decision_path": (comm.get("decision") or {}).get("path") or pp.get("path"),
                      "error": err, "phase": failed.get(r, {}).get("phase"),
                      "received_equal": comm.get("received_equal")})
    return views


def _path_text(custom: bool | None) -> str:
    if custom is None:
        return "tensor-dict path: -"
    return ("use_cpu_custom_send_recv=True\n-> custom path (CpuCommunicator)\n" if custom
            else "use_cpu_custom_send_recv=False\n-> generic path (metadata + gloo sends)\n")


def _names_line(path: str | None) -> str:
    if not path or "names_agree=" not in path:
        return ""
    value = path.split("names_agree=")[1].split(" ")[0]
    return {"yes": "SHM group names agree: yes\n", "NO": "SHM group names agree: NO (idents differ)\n"}.get(
        value, f"SHM group names agree: {value}\n")


def outcome_text(record: Mapping) -> tuple[bool, str]:
    """(delivered?, one line): the error, or what arrived."""
    err = record.get("error")
    if err:
        return False, f"✗ {err['type']}: {err['message']}"
    transfers = record.get("details", {}).get("transfers") or []
    if transfers:
        parts = [f"{t['name']} {t['dtype']} {t['shape']} ({t['bytes']} B)" for t in transfers]
        return True, "✓ delivered intact: " + ", ".join(parts)
    if record.get("output_text") is not None:
        steps = record.get("bytes_per_step") or {}
        sent = ", ".join(f"{k} {v} B" for k, v in sorted(steps.items()))
        return True, f"✓ generated {record['output_text']!r} ({record.get('outcome')})" + (
            f"; per step over the link: {sent}" if sent else "")
    return record.get("outcome") == "ok", f"outcome: {record.get('outcome')}"


def hosts_dot(record: Mapping) -> str:
    views = rank_views(record)
    if len(views) != 2:
        raise ValueError("hosts_dot draws a record of a --backend hosts run (details.hosts with 2 hosts)")
    ok, outcome = outcome_text(record)
    net = record["details"]["hosts"]
    # node margin: browsers may draw the labels wider than Graphviz measured them; the padding keeps them inside
    lines = ["digraph two_hosts {", 'graph [rankdir=TB, fontname="Helvetica", fontsize=11, nodesep=0.4, '
             'ranksep=0.35, labeljust=l];', 'node [shape=box, style="rounded,filled", fontname="Helvetica", '
             f'fontsize=10, fillcolor="{NOTE_FILL}", margin="0.22,0.07"];', 'edge [fontname="Helvetica", fontsize=9];']
    for v in views:
        k = v["rank"]
        bad = v["error"] is not None
        lines.append(f"subgraph cluster_host{k} {{")
        title = v["host"] + " (own network, mount, UTS namespaces)"
        lines.append(f'label={_q(title)}; style="rounded,filled"; fillcolor="{HOST_FILL}"; color="#555555";')
        eth = f"{v['ifname']}  {v['address']}/30"
        lines.append(f'h{k}_eth [label={_q(eth)}, shape=box, style="filled", fillcolor="#ffffff"];')
        shm = ", ".join(v.get("dev_shm") or []) or "empty"       # host<k>-marker: left by host k's launcher
        shm_label = _q(f"/dev/shm: private tmpfs\nfiles seen by rank {k}: {shm}\n")
        lines.append(f'h{k}_shm [label={shm_label}, shape=folder];')
        rank_label = (f"rank {k} · torchrun --node-rank {k}\n"
                      f"ident = {v.get('ident')} (this host's own port)\n"
                      + _names_line(v.get("decision_path")) +
                      f"backend chosen: {v.get('backend')}\n"
                      + _path_text(v.get("custom"))
                      + ("✗ " + _wrap(f"{v['error']['type']}: {v['error']['message']}", 38) if bad
                         else ("✓ received the dict intact\n" if v.get("received_equal") else "✓ no error\n")))
        lines.append(f'h{k}_rank [label={_q(rank_label)}, fillcolor="{BAD_FILL if bad else OK_FILL}", '
                     f'color="{BAD_LINE if bad else OK_LINE}", penwidth={2 if bad else 1}];')
        lines.append(f'h{k}_eth -> h{k}_rank [style=invis];')           # top-down: eth0, rank, /dev/shm
        lines.append(f'h{k}_rank -> h{k}_shm [style=dotted, arrowhead=none, label=" only its own"];')
        lines.append("}")
    lines.append(f'h0_eth -> h1_eth [dir=both, label={_q(" veth link, subnet " + net["subnet"])}, penwidth=2, '
                 'constraint=false];')
    lines.append(f'h0_rank -> h1_rank [label={_q(" PP tensor dict, gate " + str(views[0].get("gate")))}, '
                 f'color="{OK_LINE if ok else BAD_LINE}", style={"solid" if ok else "dashed"}, constraint=false];')
    lines.append(f'outcome [label={_q(_wrap(outcome, 72))}, fillcolor="{OK_FILL if ok else BAD_FILL}", '
                 f'color="{OK_LINE if ok else BAD_LINE}"];')
    logs = [f"rank {v['rank']} ({v['host']}): {ln}" for v in views for ln in v.get("log_lines", [])]
    if logs:
        text = "log lines:\n" + "".join(_wrap(ln, 72) for ln in logs)
        lines.append(f'logs [label={_q(text)}, shape=note];')
        lines.append("outcome -> logs [style=invis];")
    lines.append("h0_shm -> outcome [style=invis]; h1_shm -> outcome [style=invis];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def summary_lines(record: Mapping) -> list[str]:
    """The run in words: one line per host, then the outcome (for print())."""
    out = []
    for v in rank_views(record):
        out.append(f"{v['host']}: {v['ifname']} {v['address']}, ident {v.get('ident')}, /dev/shm "
                   f"{v.get('dev_shm') or '[]'}, backend {v.get('backend')}, custom path {v.get('custom')}"
                   + (f", {v['error']['type']}" if v.get("error") else ""))
    out.append(outcome_text(record)[1])
    return out


def tcp_table(record: Mapping) -> Sequence[str]:
    """Every TCP socket the ranks held (local -> remote), to show traffic stays on the two private addresses."""
    rows = []
    for h in record.get("details", {}).get("hosts", {}).get("hosts", []):
        for s in h.get("tcp", []):
            rows.append(f"{h['host']}: {s['state']:11} {s['local']:>22} -> {s['remote']}")
    return rows
