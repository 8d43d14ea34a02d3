"""Pure pieces of the communicator: metadata codec, configuration, decision record (no processes)."""

import json

import pytest
import torch

from explainer.distributed.device_communicators import cpu_communicator as cc
from explainer.distributed import launch
from explainer.distributed import parallel_state as ps
from explainer.distributed import tensor_metadata as tm
from explainer.distributed.device_communicators import comm_config


def test_metadata_codec_round_trips_tensors_and_values():
    d = {"hidden_states": torch.randn(2, 3), "bf": torch.zeros(0, 4, dtype=torch.bfloat16),
         "s": "text", "i": 7, "f": 0.5, "n": None, "b": True, "l": [1, "a", [2.5]], "t": (1, (2, "x")),
         "d": {"k": [1, 2], "m": {"z": None}}, "raw": b"\x00\xff"}
    meta, tensors = tm.split_tensor_dict(d)
    assert [t.shape for t in tensors] == [torch.Size([2, 3]), torch.Size([0, 4])]
    data = tm.encode_metadata(meta)
    json.loads(data)                                    # plain JSON on the wire, never pickle
    back = tm.decode_metadata(data)
    assert back[0] == ("hidden_states", tm.TensorMetadata("cpu", torch.float32, torch.Size([2, 3])))
    assert back[1] == ("bf", tm.TensorMetadata("cpu", torch.bfloat16, torch.Size([0, 4])))
    assert dict(back[2:]) == {k: v for k, v in d.items() if not isinstance(v, torch.Tensor)}
    assert isinstance(dict(back)["t"], tuple) and isinstance(dict(back)["l"], list)


@pytest.mark.parametrize("value, words", [
    (object(), ["'bad'", "object", "JSON-like"]),
    ({1: "x"}, ["'bad'", "str keys"]),
    ([torch.zeros(1)], ["'bad'", "Tensor"]),
])
def test_metadata_rejects_values_it_cannot_carry(value, words):
    meta, _ = tm.split_tensor_dict({"ok": 1, "bad": value})
    with pytest.raises(TypeError) as info:
        tm.encode_metadata(meta)
    for w in words:
        assert w in str(info.value)


def test_metadata_rejects_non_str_keys_and_unknown_dtypes():
    with pytest.raises(TypeError, match="keys must be str"):
        tm.encode_metadata([(3, 1)])
    with pytest.raises(ValueError, match="unknown dtype 'os'"):
        tm.decode_metadata(b'[["x",{"tensor":{"device":"cpu","dtype":"os","size":[1]}}]]')


def test_unique_names_count_per_kind():
    a, b = ps._get_unique_name("zz"), ps._get_unique_name("zz")
    assert (a, b) == ("zz:0", "zz:1")


def test_config_resolves_from_environment(monkeypatch):
    monkeypatch.setenv("EXPLAINER_DIST_IDENT", "43127")
    monkeypatch.setenv("EXPLAINER_SHM_OPS", "0")
    monkeypatch.setenv("EXPLAINER_CPU_ARCH", "arm")
    monkeypatch.setenv("EXPLAINER_SHM_ALLOW_ARM", "off")
    monkeypatch.setenv("EXPLAINER_COMM_TIMEOUT", "7.5")
    cfg = cc.CommConfig().resolved()
    assert (cfg.ident, cfg.shm_ops_built, cfg.cpu_arch, cfg.allow_arm, cfg.timeout) == ("43127", False, "ARM", False, 7.5)
    assert cfg.allowed_arches() == ("X86", "S390X")
    assert cc.CommConfig(allow_arm=True).resolved().allowed_arches() == comm_config.VLLM_ARCH_ALLOW_LIST


def test_config_errors_name_the_accepted_values(monkeypatch):
    with pytest.raises(ValueError, match="gate 'fixed': accepted pre-40150, post-40150"):
        cc.CommConfig(gate="fixed").resolved()
    with pytest.raises(ValueError, match="timeout -1: accepted are seconds > 0"):
        cc.CommConfig(timeout=-1).resolved()
    monkeypatch.setenv("EXPLAINER_SHM_OPS", "maybe")
    with pytest.raises(ValueError, match="EXPLAINER_SHM_OPS='maybe': accepted values are 1/0"):
        cc.CommConfig().resolved()


def test_architecture_names_follow_vllm(monkeypatch):
    monkeypatch.delenv("EXPLAINER_CPU_ARCH", raising=False)
    for machine, arch in [("x86_64", "X86"), ("aarch64", "ARM"), ("ppc64le", "POWERPC"), ("s390x", "S390X"),
                          ("riscv64", "RISCV"), ("sparc", "UNKNOWN")]:
        monkeypatch.setattr(comm_config.platform, "machine", lambda m=machine: m)
        assert comm_config.get_cpu_architecture() == arch


def test_default_ident_is_per_node(monkeypatch):
    monkeypatch.delenv("EXPLAINER_DIST_IDENT", raising=False)
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert comm_config.default_ident().endswith(":29500")


def test_decision_path_reads_like_the_tree():
    d = cc.BackendDecision("pp:0", 0, [0, 1], conditions=[
        cc.Condition("arch_allowed", "", True), cc.Condition("shm_ops_built", "", False),
        cc.Condition("group_kind_tp_pp", "", None), cc.Condition("names_agree", "", None)])
    assert d.path() == "arch_allowed=yes -> shm_ops_built=NO -> group_kind_tp_pp=skipped -> names_agree=skipped -> torch.distributed"
    assert json.loads(json.dumps(d.to_json()))["path"] == d.path()


def test_vllm_strings_are_verbatim():
    assert cc.FALLBACK_LOG % "pp:0" == ("CPU SHM communicator disabled for group pp:0: ranks do not share the same "
                                        "SHM group name, falling back to torch.distributed.")
    assert cc.NO_DICT_FASTPATH == "CpuCommunicator does not support tensor dict fastpath with torch.distributed backend."
    assert cc.ONLY_TENSORS == "CpuCommunicator only supports sending tensors."


def test_torch_distributed_really_lacks_the_dict_methods():
    # the pre-#40150 failure is this real AttributeError, not a fabricated string
    for name in ("send_tensor_dict", "recv_tensor_dict"):
        with pytest.raises(AttributeError, match=f"module 'torch.distributed' has no attribute '{name}'"):
            getattr(torch.distributed, name)


@pytest.mark.slow
def test_comm_bench_measures_every_figure_side_by_side():
    from explainer.bench import comm
    m = comm.measure(quick=True, sizes=(4096, 65536))     # structure only: timings are never asserted
    assert m["backend"] == {"shm": "shm", "generic": "torch.distributed"}
    assert set(m["throughput"]["shm"]) == set(m["throughput"]["generic"]) == {4096, 65536}
    assert m["latency"]["shm"] > 0 and m["latency"]["generic"] > 0 and m["memcpy"] > 0
    assert m["rounds"] == 2 and len(m["loadavg"]) == 2


def test_shm_ops_default_to_x86_hosts_only(monkeypatch):
    monkeypatch.delenv("EXPLAINER_SHM_OPS", raising=False)
    for machine, built in [("x86_64", True), ("aarch64", False), ("ppc64le", False)]:
        monkeypatch.setattr(comm_config.platform, "machine", lambda m=machine: m)
        assert cc.CommConfig().resolved().shm_ops_built is built


@pytest.mark.parametrize("name,value", [("EXPLAINER_COMM_TIMEOUT", "soon"), ("EXPLAINER_COMM_TIMEOUT", "-1"),
                                        ("EXPLAINER_SHM_CHUNK_BYTES", "1.5"), ("EXPLAINER_SHM_CHUNK_BYTES", "0")])
def test_bad_environment_numbers_name_the_variable(monkeypatch, name, value):
    from explainer.distributed.device_communicators.comm_config import CommConfig
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=rf"{name}={value!r}: accepted are"):
        CommConfig().resolved()


def test_simulated_nodes_get_different_idents_even_when_the_os_reuses_a_released_port(monkeypatch):
    """Each simulated node's ident is a port its launcher picked. An OS may hand a just-released port out again
    (seen once in CI: both 'nodes' got one ident, agreed on the SHM group name and chose shared memory). Here a
    fake OS always hands out the lowest port not bound right now: picking one port at a time repeats it."""
    bound = set()

    class ReusingSocket:
        def __init__(self, *a):
            self.port = None

        def bind(self, addr):
            self.port = min(p for p in range(40000, 40100) if p not in bound)
            bound.add(self.port)

        def getsockname(self):
            return ("127.0.0.1", self.port)

        def close(self):
            bound.discard(self.port)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.close()

    monkeypatch.setattr(launch.socket, "socket", ReusingSocket)
    assert launch.free_port() == launch.free_port()          # the hazard: one port at a time repeats it
    assert len(set(launch.free_ports(3))) == 3
    assert not bound                                         # every socket closed again
