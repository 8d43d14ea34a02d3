"""The engine hook behind the ``sync-fields`` exercise: state sync accepts any subset of the state fields."""

from __future__ import annotations

import pytest

from explainer.model import task
from explainer.config import EngineConfig
from explainer.engine.llm_engine import LLMEngine
from explainer.errors import UsageError
from explainer.vocab import STATE_SYNC_FIELDS
from explainer.worker.states import request_state_fields
from explainer.trace import Trace

PRE = "diffusion-gemma-tiny@pre-45828"


def _run(fields, backend="inprocess", prompt="451"):
    trace = Trace()
    engine = LLMEngine.from_engine_args(trace, model=PRE, pipeline_parallel_size=2, pp_mode="state-sync",
                                        sync_fields=fields, distributed_executor_backend=backend)
    out = engine.generate([task.encode(prompt)], max_tokens=32, seeds=[0])[0]
    return out.output_token_ids, trace


def test_fields_are_the_runners_real_state_tensors():
    fields = request_state_fields()
    assert set(STATE_SYNC_FIELDS) <= set(fields)
    assert {"canvas", "step", "num_computed_tokens", "accepted_canvas_history"} <= set(fields)
    assert "all_token_ids" not in fields                  # a Python list, not a per-slot tensor


def test_default_is_the_three_fields_of_52015_and_order_is_canonical():
    assert EngineConfig(model=PRE, pipeline_parallel_size=2, pp_mode="state-sync").sync_fields == STATE_SYNC_FIELDS
    cfg = EngineConfig(model=PRE, pipeline_parallel_size=2, pp_mode="state-sync",
                       sync_fields={"self_conditioning_embeds", "canvas"})
    assert cfg.sync_fields == ("canvas", "self_conditioning_embeds")
    assert EngineConfig(model=PRE, pipeline_parallel_size=2, pp_mode="generic-int64").sync_fields == ()


@pytest.mark.parametrize("bad", [{"canvass"}, "canvas", [1]])
def test_bad_field_names_are_usage_errors_listing_the_valid_names(bad):
    with pytest.raises(UsageError, match="accepted") as err:
        EngineConfig(model=PRE, pipeline_parallel_size=2, pp_mode="state-sync", sync_fields=bad)
    assert "draft_tokens" in str(err.value)


def test_sync_fields_needs_state_sync():
    with pytest.raises(UsageError, match="state-sync"):
        EngineConfig(model=PRE, pipeline_parallel_size=2, pp_mode="generic-int64", sync_fields=("canvas",))


def test_exactly_the_chosen_fields_travel():
    _, trace = _run(("canvas", "draft_tokens", "is_encoder_phase", "self_conditioning_embeds"))
    sent = trace.bytes_per_step()
    assert sent["canvas"] == 8 * 8 and "step" not in sent
    _, trace = _run(("draft_tokens", "is_encoder_phase"))
    assert "self_conditioning_embeds" not in trace.bytes_per_step()
    div = trace.first_divergence()                       # rank 0 then reads its own zero SC embeddings
    assert div and div["rank"] == 0 and div["fields"] == ["self_conditioning_embeds"]


def test_full_set_matches_pp1_and_has_no_divergence():
    ids, trace = _run(None)
    assert trace.first_divergence() is None
    assert task.decode(ids) == "four hundred fifty-one"


@pytest.mark.slow
def test_processes_backend_syncs_the_same_subset():
    fields = ("draft_tokens", "is_encoder_phase")
    ids_a, tr_a = _run(fields)
    ids_b, tr_b = _run(fields, backend="processes")
    assert ids_a == ids_b
    assert tr_a.first_divergence()["step"] == tr_b.first_divergence()["step"]
    assert tr_a.bytes_per_step() == tr_b.bytes_per_step()


def test_a_subset_on_the_async_schedule_is_refused_naming_the_schedule():
    # the async back-channel carries #52015's three fields only: a subset there would silently be ignored
    with pytest.raises(UsageError, match="pp_schedule='sync'"):
        EngineConfig(model=PRE, pipeline_parallel_size=2, pp_mode="state-sync", pp_schedule="async",
                     sync_fields=("draft_tokens",))
    cfg = EngineConfig(model=PRE, pipeline_parallel_size=2, pp_mode="state-sync", pp_schedule="async",
                       sync_fields=tuple(reversed(STATE_SYNC_FIELDS)))
    assert set(cfg.sync_fields) == set(STATE_SYNC_FIELDS)
