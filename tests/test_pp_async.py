"""The async PP schedule (vLLM #42187): same five outcomes as sync, deferred consumption, need_sampled_mask."""

import pytest
import torch

from explainer import scenario
from explainer.model import task
from explainer.cli import main
from explainer.distributed.inprocess import InProcessWorld, NothingPendingError
from explainer.engine.llm_engine import LLMEngine
from explainer.worker.pp_async import AsyncPPHandler, compute_need_sampled_mask
from explainer.worker.input_batch import InputBatch
from explainer.trace import Trace

NAMES = ("pp1", "pp2-pre-fix", "pp2-pre-fix-int64", "pp2-gated", "pp2-state-sync")
EXPECTED = {"pp1": "ok", "pp2-pre-fix": "warmup-crash", "pp2-pre-fix-int64": "diverged",
            "pp2-gated": "startup-rejected", "pp2-state-sync": "ok"}
PRE = "diffusion-gemma-tiny@pre-45828"
CL = task.CANVAS_LENGTH


@pytest.fixture(scope="module")
def results():
    return {s: {n: scenario.run(n, pp_schedule=s) for n in NAMES} for s in ("sync", "async")}


def test_both_schedules_give_the_five_outcomes(results):
    for sched, by_name in results.items():
        assert {n: r.outcome for n, r in by_name.items()} == EXPECTED, sched
        assert by_name["pp2-pre-fix"].error["type"] == "AssertionError"
        assert by_name["pp2-gated"].error["type"] == "NotImplementedError"
        assert by_name["pp1"].details["pp_schedule"] == sched


def test_async_state_sync_equals_pp1_token_for_token(results):
    a = results["async"]
    assert a["pp2-state-sync"].details["identical_to_pp1"] is True
    assert a["pp2-state-sync"].details["output_token_ids"] == a["pp1"].details["output_token_ids"]
    assert a["pp2-state-sync"].first_divergence is None


def test_async_stale_rank0_still_reads_the_wrong_phase(results):
    div = results["async"]["pp2-pre-fix-int64"].first_divergence
    assert div["rank"] == 0 and "is_encoder_phase" in div["fields"]
    # drafts ride the async back-channel: rank 0's canvas ids are right when it reads them (sync: they are not)
    assert "draft_tokens" not in results["async"]["pp2-pre-fix-int64"].details["fields_diverged_during_run"]
    assert "draft_tokens" in results["sync"]["pp2-pre-fix-int64"].details["fields_diverged_during_run"]


def test_async_back_channel_is_consumed_pp_size_steps_later(results):
    t = results["async"]["pp2-state-sync"].trace
    consumed = t.select(rank=0, phase="consume")
    assert consumed and all(e.step - e.data["consumed_step"] == 2 for e in consumed)
    sent = {n for e in t.select(rank=1, phase="broadcast") for n in (x.name for x in e.transfers)}
    assert {"sampled_token_ids", "num_sampled_num_rejected", "draft_tokens"} <= sent
    receives = t.select(rank=0, phase="receive")
    posted = [e for e in receives if e.data.get("posted")]
    delivered = [e for e in receives if "delivered_step" in e.data]
    assert posted and {e.step for e in posted} == {e.data["delivered_step"] for e in delivered}
    for e in delivered:                         # delivered at the tick the last rank broadcast that step
        bc = next(b for b in t.select(rank=1, phase="broadcast") if b.step == e.data["delivered_step"])
        assert bc.data["tick"] == e.data["tick"]


def test_rank0_num_computed_tokens_is_optimistic_until_it_consumes():
    """After a denoise step rank 0 still counts the CL rejected tokens; the owner already rolled back."""
    trace = Trace()
    engine = LLMEngine.from_engine_args(trace, model=PRE, pipeline_parallel_size=2, pp_mode="state-sync",
                                        pp_schedule="async")
    engine.generate([task.encode("451")], max_tokens=CL, seeds=[0])
    posted = [e for e in trace.select(rank=0, phase="receive") if e.data.get("posted")]
    gaps = set()
    for e in posted:
        for req in e.reads or e.views[0]:
            if req in e.views[1]:
                gaps.add(e.views[0][req]["num_computed_tokens"] - e.views[1][req]["num_computed_tokens"])
    assert CL in gaps                          # optimistic: a denoise step's CL tokens not yet rolled back
    prepares = trace.select(rank=0, phase="prepare")
    owner = {e.step: e.views[1] for e in trace.select(rank=1, phase="prepare")}
    for e in prepares:                          # but every read happens after consuming: counts agree
        for req in e.reads:
            assert e.views[0][req]["num_computed_tokens"] == owner[e.step][req]["num_computed_tokens"]


def test_async_inprocess_equals_processes(results):
    for name in NAMES:
        a = results["async"][name]
        b = scenario.run(name, "processes", pp_schedule="async")
        assert (a.outcome, a.output_text, a.error) == (b.outcome, b.output_text, b.error), name
        da, db = a.first_divergence, b.first_divergence
        assert (da and (da["step"], da["rank"], da["fields"])) == (db and (db["step"], db["rank"], db["fields"]))
        assert b.processes_started == {"pp1": 1, "pp2-gated": 0}.get(name, 2), name


def test_the_timeline_is_the_same_on_one_process_per_rank():
    from explainer.trace.timeline import pipeline_timeline
    timelines = []
    for backend in ("inprocess", "processes"):
        trace = Trace()
        engine = LLMEngine.from_engine_args(trace, model=PRE, pipeline_parallel_size=2, pp_mode="state-sync",
                                            pp_schedule="async", max_num_batched_tokens=CL,
                                            distributed_executor_backend=backend)
        engine.generate([task.encode("451"), task.encode("909")], max_tokens=3 * CL, seeds=[0, 1])
        tl = pipeline_timeline(trace)
        timelines.append((tl.start, tl.end, [(c.rank, c.tick, c.step) for c in tl.forwards],
                          sorted((a.kind, a.step, a.src_rank, a.dst_rank, a.src_tick, a.dst_tick) for a in tl.arrows)))
    assert timelines[0] == timelines[1]


def _batch(n, lens):
    return InputBatch([f"r{i}" for i in range(n)], list(range(n)), list(lens), [False] * n, [True] * n,
                      [torch.zeros(k, dtype=torch.int64) for k in lens], [torch.arange(k) for k in lens])


def test_need_sampled_mask_skips_only_non_final_prefill_chunks():
    assert compute_need_sampled_mask(_batch(2, [4, 4]), [0, 4], [8, 8]) == [False, True]
    assert compute_need_sampled_mask(_batch(1, [4]), [0], [8]) is None          # no collective this step


def test_ranks_that_disagree_on_the_mask_end_in_a_timeout_naming_the_peer():
    """PR #52015's hazard: the broadcast happens only if both sides' masks say so. Here the last rank
    skips (mask None) while rank 0 posted a receive: rank 0's wait ends naming rank 1, never hangs."""
    world = InProcessWorld(2)
    g0, g1 = world.groups()
    h0 = AsyncPPHandler(g0, num_spec=CL, hidden_size=64, mode="generic", max_num_reqs=2)
    h1 = AsyncPPHandler(g1, num_spec=CL, hidden_size=64, mode="generic", max_num_reqs=2)
    batch = _batch(1, [CL])
    h0.post_receive(7, batch, [True])
    sent = h1.broadcast_async(torch.zeros(1, CL, dtype=torch.int64), torch.zeros(1, dtype=torch.int32),
                              torch.full((1,), CL, dtype=torch.int32), batch, None, torch.zeros(1, CL))
    assert sent is False                                   # early return, before the int64 assert
    with pytest.raises(NothingPendingError, match="rank 1"):
        h0.deliver(7)


def test_the_early_return_comes_before_the_int64_assert():
    world = InProcessWorld(2)
    h1 = AsyncPPHandler(world.group(1), num_spec=CL, hidden_size=64, mode="generic", max_num_reqs=2)
    int32 = torch.zeros(1, CL, dtype=torch.int32)
    args = (torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32), _batch(1, [CL]))
    assert h1.broadcast_async(int32, *args, None, torch.zeros(1, CL)) is False
    with pytest.raises(AssertionError):
        h1.broadcast_async(int32, *args, [True], torch.zeros(1, CL))


def test_cli_pp_schedule_bad_value_exits_2(capsys):
    assert main(["scenario", "pp1", "--pp-schedule", "eager"]) == 2
    err = capsys.readouterr().err
    assert "unknown pp schedule 'eager'; accepted: sync, async" in err and "Traceback" not in err


def test_engine_step_drives_one_tick_at_a_time():
    outs = {}
    for how in ("generate", "step"):
        engine = LLMEngine.from_engine_args(Trace(enabled=False), model=PRE, pipeline_parallel_size=2,
                                            pp_mode="state-sync", pp_schedule="async", max_num_batched_tokens=CL)
        if how == "generate":
            outs[how] = [o.output_token_ids for o in engine.generate([task.encode("451"), task.encode("909")],
                                                                        max_tokens=3 * CL, seeds=[0, 1])]
            continue
        for p, seed in (("451", 0), ("909", 1)):
            engine.add_request(task.encode(p), 3 * CL, seed=seed)
        done, ticks = {}, 0
        while len(done) < 2:
            done.update({o.req_id: o.output_token_ids for o in engine.step()})
            ticks += 1
        outs[how] = [done["req-0"], done["req-1"]]
        assert ticks < 30                                        # two requests overlap: ~21 ticks, not 38
    assert outs["generate"] == outs["step"]


def test_bytes_per_step_async_adds_exactly_the_drafts(results):
    s, a = (results[k]["pp2-pre-fix-int64"].bytes_per_step for k in ("sync", "async"))
    assert a == {**s, "draft_tokens": CL * 8}                      # int64 [1, CL]
    assert results["async"]["pp2-state-sync"].bytes_per_step == results["sync"]["pp2-state-sync"].bytes_per_step


def test_the_mask_is_0_32_0s_a_final_prefill_chunk_at_its_length_cap_needs_no_sample():
    """vLLM 0.32.0's ``compute_need_sampled_mask``: with the requests' caps (batches with a prefill), a final
    prefill chunk whose one sampled token reaches ``max_seq_len`` is dropped; without caps it is 007f85b5's form."""
    from explainer.worker.input_batch import InputBatch
    from explainer.worker.pp_async import compute_need_sampled_mask

    batch = InputBatch(["a", "b"], [0, 1], [4, 4], [False, False], [True, True], [], [])
    assert compute_need_sampled_mask(batch, [0, 0], [4, 4]) == [True, True]                 # 007f85b5
    assert compute_need_sampled_mask(batch, [0, 0], [4, 4], [5, 9], [True, True]) == [False, True]
    assert compute_need_sampled_mask(batch, [0, 0], [4, 4], [5, 5], [True, True]) is None    # no collective
    assert compute_need_sampled_mask(batch, [0, 0], [4, 4], [None, 5], [True, False]) == [True, True]


def test_the_back_channel_has_its_own_group_the_pp_broadcast_sibling():
    from explainer.distributed.inprocess import InProcessWorld
    from explainer.worker.pp_async import AsyncPPHandler

    g0, g1 = InProcessWorld(2).groups()
    h = AsyncPPHandler(g1, num_spec=4, hidden_size=8, mode="generic", max_num_reqs=2)
    assert h.broadcast_group.channel == "pp_broadcast" and h.broadcast_group.world is g1.world
    assert h.group is g1 and h.broadcast_group is not g1
