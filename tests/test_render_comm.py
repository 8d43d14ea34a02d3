"""Renderers of the CPU communicator (#40150): highlighted DOT paths, observed values, per-rank table, figure."""

import re
import shutil
import subprocess

import pytest

from explainer.render import comm as R
from explainer.distributed.device_communicators.cpu_communicator import FALLBACK_LOG, BackendDecision, Condition

NAMES = ("arch_allowed", "shm_ops_built", "group_kind_tp_pp", "names_agree")


def decision(values, *, prefix="pp", idents=("41000", "41000"), rank=0, arch="X86"):
    """A real ``BackendDecision`` as the communicator records it (values: True/False/None per condition)."""
    names = [f"{i}-{prefix}:0-[0-1]-cpushm" for i in idents]
    details = [f"{arch} in {{X86, ARM, S390X}}", "shm_ops_built=True", f"unique_name='{prefix}:0'", f"names={names}"]
    d = BackendDecision(f"{prefix}:0", rank, [0, 1], gate="post-40150")
    d.conditions = [Condition(n, "expr", v, det if v is not None else "not evaluated")
                    for n, v, det in zip(NAMES, values, details)]
    if values[:3] == (True, True, True):
        d.group_name, d.names_seen = names[rank], names
    d.backend = "shm" if all(v is True for v in values) else "torch.distributed"
    d.supports_tensor_dict = d.backend == "shm"
    if d.backend != "shm" and prefix in ("tp", "pp"):
        d.log_lines.append("INFO " + FALLBACK_LOG % d.unique_name)
    return d


def run(values, gate, *, nodes=1, prefix="pp", errors=(None, None), received=True):
    """Per-rank records shaped like ``scenario.comm.exchange_rank`` returns them."""
    idents = ("41000", "41000") if nodes == 1 else ("41000", "42000")
    out = []
    for r in range(2):
        d = decision(values, prefix=prefix, idents=idents, rank=r)
        custom = (gate == "pre-40150") or d.supports_tensor_dict
        gi = ({"is_cpu": True, "shm_ops_built": True} if gate == "pre-40150" else
              {"is_cpu": True, "device_communicator": True, "supports_tensor_dict": d.supports_tensor_dict})
        t = [{"sender": 0, "receiver": 1, "name": n, "dtype": "float32", "shape": [2, 8, 64], "bytes": 4096}
             for n in ("hidden_states", "residual")]
        out.append({"rank": r, "ident": idents[r], "node": 0 if nodes == 1 else r, "pid": 4242 + r, "gate": gate,
                    "backend": d.backend, "decision": d.to_json(), "log_lines": list(d.log_lines),
                    "use_cpu_custom_send_recv": custom, "gate_inputs": gi,
                    "path": "custom (CpuCommunicator)" if custom else "generic (metadata + gloo sends)",
                    "error": errors[r], "transfers": [] if errors[r] else t,
                    "received_equal": (received if r == 1 and not errors[r] else None)})
    return out


def classes(dot):
    nodes = dict(re.findall(r'^  (\w+) \[id="\w+", class="(taken|not-taken)"', dot, re.M))
    edges = dict(re.findall(r'^  (\w+ -> \w+) \[id="[^"]+", class="(taken|not-taken)"', dot, re.M))
    return ({n for n, c in nodes.items() if c == "taken"}, {n for n, c in nodes.items() if c == "not-taken"},
            {e for e, c in edges.items() if c == "taken"}, {e for e, c in edges.items() if c == "not-taken"})


def label(dot, node):
    return re.search(rf'^  {node} \[.*label="((?:[^"\\]|\\.)*)"\];$', dot, re.M).group(1)


SAME_NODE = (True, True, True, True)
INTER_NODE = (True, True, True, False)
PRE_ERRORS = ({"type": "AttributeError", "message": "module 'torch.distributed' has no attribute 'send_tensor_dict'"},
              {"type": "AttributeError", "message": "module 'torch.distributed' has no attribute 'recv_tensor_dict'"})


def test_same_node_path_is_the_shm_chain_only():
    dot = R.selection_dot(decision(SAME_NODE))
    taken, off, te, oe = classes(dot)
    assert taken == {"start", "c_arch", "c_ops", "c_kind", "c_names", "shm"}
    assert off == {"elif_kind", "fb_log", "fb_silent"}
    assert te == {"start -> c_arch", "c_arch -> c_ops", "c_ops -> c_kind", "c_kind -> c_names", "c_names -> shm"}
    assert all(e.endswith("-> elif_kind") or e.startswith("elif_kind") for e in oe)
    assert "observed: ✓ yes (X86 in {X86, ARM, S390X})" in label(dot, "c_arch")
    assert "rank 1: 41000-pp:0-[0-1]-cpushm" in label(dot, "c_names")
    assert "supports_tensor_dict = True" in label(dot, "shm")
    assert "penwidth=3" in re.search(r"^  c_names -> shm .*$", dot, re.M).group(0)
    assert "style=dashed" in re.search(r"^  c_names -> elif_kind .*$", dot, re.M).group(0)


def test_name_disagreement_falls_back_with_vllms_log_line():
    dot = R.run_selection_dot(run(INTER_NODE, "post-40150", nodes=2), rank=1)
    taken, off, te, _ = classes(dot)
    assert taken == {"start", "c_arch", "c_ops", "c_kind", "c_names", "elif_kind", "fb_log"}
    assert {"shm", "fb_silent"} <= off and "c_names -> elif_kind" in te and "c_names -> shm" not in te
    assert "observed: ✗ NO" in label(dot, "c_names")
    assert "PORT@node0-pp:0-[0-1]-cpushm" in label(dot, "c_names") and "42000" not in dot
    assert "CPU SHM communicator disabled for group pp:0" in label(dot, "fb_log")


def test_short_circuit_marks_later_conditions_not_evaluated():
    dot = R.selection_dot(decision((False, None, None, None), arch="POWERPC"))
    taken, off, te, _ = classes(dot)
    assert taken == {"start", "c_arch", "elif_kind", "fb_log"}     # the elif checks only the prefix
    assert {"c_ops", "c_kind", "c_names", "shm"} <= off
    assert te == {"start -> c_arch", "c_arch -> elif_kind", "elif_kind -> fb_log"}
    assert "not evaluated (short-circuit)" in label(dot, "c_ops")
    assert "observed: ✗ NO (POWERPC in" in label(dot, "c_arch")


def test_non_tp_pp_group_falls_back_silently():
    taken, _, te, _ = classes(R.selection_dot(decision((True, True, False, None), prefix="dp")))
    assert "fb_silent" in taken and "fb_log" not in taken and "elif_kind -> fb_silent" in te


def test_pre_fix_inter_node_ends_in_attribute_error_on_both_ranks():
    dot = R.tensor_dict_dot(run(INTER_NODE, "pre-40150", nodes=2, errors=PRE_ERRORS))
    taken, off, te, _ = classes(dot)
    assert taken == {"call", "gate", "custom", "attr_error"}
    assert {"generic", "delivered", "shm_stream", "nie"} <= off
    assert te == {"call -> gate", "gate -> custom", "custom -> attr_error"}
    text = label(dot, "attr_error").replace("\\n", " ")
    assert "rank 0: AttributeError: module 'torch.distributed' has no attribute 'send_tensor_dict'" in text
    assert "rank 1: AttributeError: module 'torch.distributed' has no attribute 'recv_tensor_dict'" in text
    assert "pre-#40150" in label(dot, "gate") and "shm_ops_built=True -> True" in label(dot, "gate")


def test_post_fix_inter_node_takes_the_generic_path_and_delivers():
    dot = R.tensor_dict_dot(run(INTER_NODE, "post-40150", nodes=2))
    taken, off, te, _ = classes(dot)
    assert taken == {"call", "gate", "generic", "delivered"} and {"custom", "attr_error"} <= off
    assert te == {"call -> gate", "gate -> generic", "generic -> delivered"}
    assert "supports_tensor_dict=False -> False" in label(dot, "gate")
    assert "hidden_states float32 [2, 8, 64]" in label(dot, "delivered")


def test_same_node_routes_through_shared_memory():
    taken, _, te, _ = classes(R.tensor_dict_dot(run(SAME_NODE, "post-40150")))
    assert taken == {"call", "gate", "custom", "shm_stream", "delivered"}
    assert "shm_stream -> delivered" in te and "generic -> delivered" not in te


def test_ranks_table_shows_backend_log_and_outcome_per_rank():
    html = R.ranks_table_html(run(INTER_NODE, "pre-40150", nodes=2, errors=PRE_ERRORS))
    assert 'id="xp-comm-ranks"' in html and 'id="xp-comm-rank-1"' in html
    cell = lambda row, r: re.search(rf'data-rank="{r}" data-row="{re.escape(row)}">(.*?)</td>', html).group(1)  # noqa: E731
    assert cell("backend", 0) == "<code>torch.distributed</code>"
    assert cell("supports_tensor_dict", 1) == "False" and cell("use_cpu_custom_send_recv", 1) == "True"
    assert "CPU SHM communicator disabled for group pp:0" in cell("log lines", 0)
    assert "recv_tensor_dict" in cell("outcome", 1) and 'class="xp-error" data-rank="1"' in html
    assert "PORT@node1-pp:0-[0-1]-cpushm" in cell("SHM group name (own / all seen)", 1)
    assert "41000" not in html and "4242" not in html and "xp-legend" in html
    ok = R.ranks_table_html(run(SAME_NODE, "post-40150"))
    assert 'class="xp-shm" data-rank="0"' in ok and "equal to what was sent: True" in ok
    assert "float32 [2, 8, 64]" in ok


def test_describe_run_is_run_independent():
    a = R.describe_run(run(INTER_NODE, "post-40150", nodes=2))
    assert "rank 1 (node 1): backend torch.distributed" in a and "42000" not in a
    assert "log: INFO CPU SHM communicator disabled for group pp:0" in a


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz dot binary not installed")
def test_dot_sources_render():
    for dot in (R.selection_dot(decision(SAME_NODE)),
                R.tensor_dict_dot(run(INTER_NODE, "pre-40150", nodes=2, errors=PRE_ERRORS))):
        svg = subprocess.run(["dot", "-Tsvg"], input=dot.encode(), capture_output=True, check=True).stdout
        assert b'class="node taken"' in svg or b'class="taken"' in svg


def test_bench_figure_plots_both_paths_and_says_when_and_under_what_load():
    sizes = (4096, 1 << 20)
    m = {"latency": {"shm": 2e-5, "generic": 2e-3, "floor": 8e-6}, "memcpy": 1e10,
         "throughput": {"shm": {s: 5e9 for s in sizes}, "generic": {str(s): 1e8 for s in sizes}},
         "measured_at": "2026-12-02 07:37 UTC", "loadavg": (3.7, 3.9), "cpus": 2}
    fig = R.bench_figure(m)
    (ax,) = fig.axes                                            # one panel: time per dict against size
    labels = [line.get_label() for line in ax.lines]
    assert any("shared memory" in x for x in labels) and any("gloo" in x for x in labels)
    shm = next(line for line in ax.lines if "shared memory" in line.get_label())
    assert list(shm.get_ydata()) == pytest.approx([4096 / 5e9 * 1e6, (1 << 20) / 5e9 * 1e6])
    points = {c.get_label(): c.get_offsets()[0][1] for c in ax.collections}   # the three one-way marks
    assert points["raw shared-memory floor: 4 KiB one way"] == pytest.approx(8.0)
    assert points["shm: 4 KiB ping-pong, one way"] == pytest.approx(20.0)
    assert "2026-12-02 07:37 UTC" in ax.get_title() and "load average 3.7 → 3.9" in ax.get_title()
    assert ax.get_legend().get_bbox_to_anchor().y0 < ax.get_window_extent().y0           # legend below the plot


def _edge_label(dot: str, a: str, b: str) -> str:
    return re.search(rf'^  {a} -> {b} .*label="([^"]*)"', dot, re.M).group(1)


def test_decision_edges_and_legend_carry_symbols_not_colour_names():
    dot = R.run_selection_dot(run(INTER_NODE, "post-40150", nodes=2), rank=1)
    assert _edge_label(dot, "c_kind", "c_names") == "▶ ✓ yes"           # taken, condition held
    assert _edge_label(dot, "c_names", "elif_kind") == "▶ ✗ no"         # taken, condition failed
    assert _edge_label(dot, "c_names", "shm") == "✓ yes"                # not taken: no ▶
    legend = re.search(r'^  legend .*label="([^"]*)"', dot, re.M).group(1)
    assert "✓ yes" in legend and "✗ NO" in legend and "▶" in legend
    for colour in ("green", "red", "orange", "blue"):
        assert colour not in legend
    routing = R.tensor_dict_dot(run(INTER_NODE, "pre-40150", nodes=2, errors=PRE_ERRORS))
    assert _edge_label(routing, "gate", "custom") == "▶ ✓ True" and "✗ dist_module" in label(routing, "attr_error")
