"""The engine at PP=2 over the in-process group: warmup crash, silent divergence, state sync, transfers."""

import pytest
import torch

from explainer.model import task
from explainer.distributed.inprocess import BroadcastMismatchError, InProcessWorld, NothingPendingError
from explainer.engine.errors import RankFailure
from explainer.engine.llm_engine import LLMEngine
from explainer.errors import UsageError
from explainer.trace import Trace

PRE = "diffusion-gemma-tiny@pre-45828"
CL, H = task.CANVAS_LENGTH, 64
PROMPTS = [task.encode(str(n)) for n in (451, 100, 707, 999)]
SEEDS = [0, 1, 2, 3]
MAX_TOKENS = task.MAX_CANVASES * CL
GENERIC = {"sampled_token_ids", "num_sampled_num_rejected"}
STATE_SYNC = GENERIC | {"draft_tokens", "is_encoder_phase", "self_conditioning_embeds"}


def run(pp, mode="generic", model=PRE, **kw):
    trace = Trace()
    engine = LLMEngine.from_engine_args(trace, model=model, pipeline_parallel_size=pp, pp_mode=mode, **kw)
    outs = engine.generate(PROMPTS, max_tokens=MAX_TOKENS, seeds=SEEDS)
    return [o.output_token_ids for o in outs], trace, engine


@pytest.fixture(scope="module")
def pp1():
    return run(1, model="diffusion-gemma-tiny")


@pytest.fixture(scope="module")
def int64():
    return run(2, "generic-int64")


@pytest.fixture(scope="module")
def state_sync():
    return run(2, "state-sync")


def test_pp2_generic_crashes_in_warmup_on_the_int64_assert():
    trace = Trace()
    with pytest.raises(RankFailure) as exc:
        LLMEngine.from_engine_args(trace, model=PRE, pipeline_parallel_size=2)
    f = exc.value
    assert f.warmup and f.rank == 1 and f.phase == "broadcast"
    assert type(f.cause) is AssertionError and str(f.cause) == ""          # bare, as vLLM's
    assert [(r, p, type(e)) for r, p, e in f.failures] == [(1, "broadcast", AssertionError),
                                                           (0, "receive", NothingPendingError)]
    assert "broadcast(src=1) has nothing pending from rank 1" in str(f.failures[1][2])
    crash = [e for e in trace.events if e.data.get("error")]
    assert [(e.rank, e.phase, e.warmup, e.step) for e in crash] == [(1, "broadcast", True, 1), (0, "receive", True, 1)]
    assert crash[0].data["error"]["message"] == "assert sampled_token_ids.dtype == torch.int64"
    sample = trace.select(rank=1, phase="sample", warmup=True)
    assert sample[0].data["sampled_dtype"] == "int32" and "prefill done" in sample[0].detail
    assert not trace.select(warmup=False, phase="prepare")                 # no user request ever ran


def test_pp2_int64_diverges_at_the_first_denoise_step(pp1, int64):
    tokens, trace, _ = int64
    first = trace.first_divergence()
    assert (first["step"], first["rank"], first["phase"], first["request"]) == (2, 0, "prepare", "req-0")
    assert sorted(first["fields"]) == ["draft_tokens", "is_encoder_phase"]
    assert first["values"]["is_encoder_phase"] == {"rank": True, "owner": False}
    assert first["values"]["draft_tokens"]["rank"] != first["values"]["draft_tokens"]["owner"]
    assert {f for d in trace.divergences() for f in d["fields"]} == {
        "draft_tokens", "is_encoder_phase", "self_conditioning_embeds"}
    sample = trace.select(rank=1, phase="sample")[0]
    assert sample.data["sampled_dtype"] == "int64"
    # rank 0 never leaves encoder phase and never gets self-conditioning; its text differs from PP=1
    rank0 = [e.views[0][r] for e in trace.select(rank=0, phase="prepare") for r in e.reads]
    assert all(v["is_encoder_phase"] for v in rank0) and all(v["self_conditioning_embeds"] == 0 for v in rank0)
    assert tokens != pp1[0]
    assert trace.first_output_divergence(pp1[1]) is not None
    assert trace.first_divergence(include_warmup=True)["warmup"] is True    # it was already wrong in warmup


def test_pp2_state_sync_equals_pp1_token_for_token(pp1, state_sync):
    tokens, trace, _ = state_sync
    assert tokens == pp1[0]
    assert trace.first_divergence(include_warmup=True) is None
    assert trace.first_output_divergence(pp1[1]) is None
    assert [task.decode(t) for t in tokens] == [task.spell(n) for n in (451, 100, 707, 999)]


def _transfers(trace):
    return [t for e in trace.events if not e.warmup for t in e.transfers]


@pytest.mark.parametrize("which, names", [("int64", GENERIC), ("state_sync", STATE_SYNC)])
def test_back_channel_carries_exactly(request, which, names):
    _, trace, _ = request.getfixturevalue(which)
    back = [t for t in _transfers(trace) if t.sender == 1]
    assert {t.name for t in back} == names
    forward = [t for t in _transfers(trace) if t.sender == 0]
    assert {t.name for t in forward} == {"hidden_states", "residual"}
    for t in back:
        n = t.shape[-1] if t.name == "num_sampled_num_rejected" else t.shape[0]
        expected = {"sampled_token_ids": ("int64", [n, CL + 1], 8 * n * (CL + 1)),
                    "num_sampled_num_rejected": ("int32", [2, n], 8 * n),
                    "draft_tokens": ("int64", [n, CL], 8 * n * CL),
                    "is_encoder_phase": ("bool", [n], n),
                    "self_conditioning_embeds": ("float32", [n, CL, H], 4 * n * CL * H)}[t.name]
        assert (t.dtype, t.shape, t.bytes) == expected and t.receiver == 0


def test_bytes_per_step_per_mode(int64, state_sync):
    generic, synced = int64[1].bytes_per_step(), state_sync[1].bytes_per_step()
    assert set(generic) == GENERIC | {"hidden_states", "residual"}
    assert set(synced) == STATE_SYNC | {"hidden_states", "residual"}

    def step2(trace):          # all 4 requests in their first denoise step, in both runs
        return {t.name: t.bytes for e in trace.select(step=2) for t in e.transfers}
    n = len(PROMPTS)
    assert step2(int64[1]) == {"hidden_states": 4 * n * CL * H, "residual": 4 * n * CL * H,
                               "sampled_token_ids": 8 * n * (CL + 1), "num_sampled_num_rejected": 8 * n}
    assert step2(state_sync[1]) == {**step2(int64[1]), "draft_tokens": 8 * n * CL, "is_encoder_phase": n,
                                    "self_conditioning_embeds": 4 * n * CL * H}


def test_ranks_keep_their_own_state(state_sync):
    _, _, engine = state_sync
    r0, r1 = (w.model_runner for w in engine.executor.workers)
    assert r0.sampler is None and r1.sampler is not None
    assert r0.model_state is not r1.model_state and r0.req_states is not r1.req_states
    assert r1.intermediate_tensors["hidden_states"].shape == (1, engine.config.max_num_batched_tokens, H)
    assert not hasattr(r0, "intermediate_tensors")
    assert r0.req_states.req_id_to_slot == {} == r1.req_states.req_id_to_slot    # finished requests freed
    assert engine.executor.world.pending() == []                                # nothing left in flight


def test_pp4_state_sync_also_matches(pp1):
    tokens, trace, _ = run(4, "state-sync")
    assert tokens == pp1[0]
    assert trace.meta["layers"] == {"0": [0, 1], "1": [1, 2], "2": [2, 3], "3": [3, 4]}


# ---- the in-process group (Seam 3) ------------------------------------------------------------------------
def test_inprocess_group_send_recv_broadcast():
    g0, g1 = InProcessWorld(2).groups()
    assert (g0.is_first_rank, g0.is_last_rank, g1.is_last_rank, g1.world_size) == (True, False, True, 2)
    payload = {"hidden_states": torch.ones(1, 2, 3), "note": "x"}
    g0.send_tensor_dict(payload)
    payload["hidden_states"].zero_()                                         # sender reuses its buffer
    got = g1.recv_tensor_dict()
    assert torch.equal(got["hidden_states"], torch.ones(1, 2, 3)) and got["note"] == "x"
    g1.broadcast(torch.tensor([[7, 8]]), src=1)
    buf = torch.empty(1, 2, dtype=torch.int64)
    assert g0.broadcast(buf, src=1) is buf and buf.tolist() == [[7, 8]]


def test_inprocess_group_names_the_missing_peer_instead_of_hanging():
    g0, g1 = InProcessWorld(2).groups()
    with pytest.raises(NothingPendingError, match=r"rank 1: recv_tensor_dict\(src=0\) has nothing pending from rank 0"):
        g1.recv_tensor_dict()
    with pytest.raises(TimeoutError, match="rank 0: broadcast"):
        g0.broadcast(torch.empty(3), src=1)


def test_inprocess_broadcast_enforces_dtype_and_shape():
    g0, g1 = InProcessWorld(2).groups()
    g1.broadcast(torch.zeros(2, 9, dtype=torch.int32), src=1)
    with pytest.raises(BroadcastMismatchError, match="sent torch.int32 \\(2, 9\\) but the receiver pre-allocated "
                                                     "torch.int64 \\(2, 9\\)"):
        g0.broadcast(torch.empty(2, 9, dtype=torch.int64), src=1)
    g1.broadcast(torch.zeros(3), src=1)
    with pytest.raises(BroadcastMismatchError, match="\\(3,\\).*\\(4,\\)"):
        g0.broadcast(torch.empty(4), src=1)


def test_inprocess_group_rejects_bad_peers():
    g0, _ = InProcessWorld(2).groups()
    with pytest.raises(UsageError, match="dst must be another rank in \\[0, 1\\]"):
        g0.send_tensor_dict({}, dst=0)
    with pytest.raises(UsageError):
        InProcessWorld(0)


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["sync", "async"])
def test_the_stage_to_stage_transfer_is_the_workers_blocking_or_not_the_same_text(schedule):
    """vLLM 0.32.0's worker posts irecv/isend and waits later (``pp_transfer="async"``); the older form waits each
    at once (``"blocking"``). One process per rank, real gloo: the same tokens either way, and nothing in flight."""
    from explainer.engine.llm_engine import LLMEngine
    from explainer.model import task
    from explainer.trace import Trace

    texts = {}
    for transfer in ("async", "blocking"):
        engine = LLMEngine.from_engine_args(Trace(), model="diffusion-gemma-tiny@pre-45828", pipeline_parallel_size=2,
                                            pp_mode="state-sync", pp_schedule=schedule, pp_transfer=transfer,
                                            distributed_executor_backend="processes")
        out = engine.generate([task.encode("451")], max_tokens=3 * task.CANVAS_LENGTH, seeds=[0])[0]
        assert engine.processes_started == 2
        texts[transfer] = task.decode(out.output_token_ids)
    assert texts["async"] == texts["blocking"] == "four hundred fifty-one"
