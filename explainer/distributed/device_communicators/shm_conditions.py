"""The four conditions of vLLM's ``CpuCommunicator.__init__`` ``if``, and what really failed when it falls back.

vLLM 0.32.0 (``0.32.0 distributed/device_communicators/cpu_communicator.py:34-51 _all_group_ranks_share_shm_group_name()``)
takes shared memory only when the architecture is allow-listed, ``torch.ops._C`` has ``init_shm_manager``, the
group is tp/pp and every rank computed the same SHM group name, tested in that order with ``and``. Its ``elif``
then logs "ranks do not share the same SHM group name" whenever the group is tp/pp: after *any* failed condition.
On vLLM's ``_C_AVX2`` build (an AVX2-only CPU) the second fails and the names are never compared, yet the line
blames them. ``really_failed`` says what did.
"""

from __future__ import annotations

# CpuCommunicator.__init__'s ``if``, in vLLM's order: (condition, vLLM's expression, what it means when False)
CONDITIONS = (
    ("arch_allowed", "get_cpu_architecture() in allow_list", "the CPU architecture is not in the allow-list"),
    ("shm_ops_built", 'hasattr(torch.ops._C, "init_shm_manager")',
     "this build has no shared-memory ops (no torch.ops._C.init_shm_manager)"),
    ("group_kind_tp_pp", 'unique_name.startswith(("tp", "pp"))', "the group is neither tp nor pp"),
    ("names_agree", "len(set(all_gather_object(make_group_name()))) == 1", "the ranks' SHM group names differ"),
)


def short_circuit(values: dict[str, bool]) -> dict[str, bool | None]:
    """The conditions as Python's ``and`` evaluates them: after the first False the rest are not evaluated (None)."""
    out: dict[str, bool | None] = {}
    going = True
    for name, _, _ in CONDITIONS:
        out[name] = bool(values[name]) if going else None
        going = going and bool(values[name])
    return out


def fallback_cause(evaluated: dict[str, bool | None]) -> str | None:
    """The condition whose False kept the backend on torch.distributed (None: every condition held)."""
    return next((name for name, _, _ in CONDITIONS if evaluated.get(name) is False), None)


def really_failed(evaluated: dict[str, bool | None], names_agree: bool | None = None) -> str | None:
    """What failed, in words, beside vLLM's log line; ``names_agree`` is what the name comparison would have said
    when the ``and`` never reached it (None: unknown)."""
    cause = fallback_cause(evaluated)
    if cause is None:
        return None
    text = next(why for name, _, why in CONDITIONS if name == cause)
    if cause != "names_agree" and evaluated.get("names_agree") is None:
        text += "; the SHM group names were never compared" + (
            "" if names_agree is None else f" (they {'agree' if names_agree else 'differ'})")
    return text


def judge_ranks(local: list[dict]) -> list[dict]:
    """For ranks that report their three local conditions and their SHM group name (vLLM's ranks do:
    ``explainer.vllm_side.comm_rank.conditions_of``): per rank, the conditions as the ``and`` evaluated them, the
    one that failed and what failed in words. The fourth condition compares every rank's name."""
    names = [c.get("shm_group_name") for c in local]
    agree = None not in names and len(set(names)) == 1
    out = []
    for c in local:
        evaluated = short_circuit({"arch_allowed": c["arch_allowed"], "shm_ops_built": c["shm_ops_built"],
                                   "group_kind_tp_pp": c["group_kind_tp_pp"], "names_agree": agree})
        out.append({"evaluated": evaluated, "fallback_cause": fallback_cause(evaluated),
                    "really_failed": really_failed(evaluated, agree)})
    return out
