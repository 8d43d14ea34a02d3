"""Startup gating (vLLM PR #45828): ``supports_pp``, the registry, and ``EngineConfig.__post_init__``."""

import logging
import multiprocessing

import pytest

from explainer.model import task
from torch import nn

from explainer import config as config_mod
from explainer.engine import inprocess_executor as executor_mod
from explainer.engine import llm_engine as engine_mod
from explainer.worker import model_runner as runner
from explainer.model import registry
from explainer.config import (FLASHINFER_MESSAGE, PP_NOT_SUPPORTED_MESSAGE, EngineConfig,
                              PipelineParallelNotSupportedError)
from explainer.distributed import inprocess
from explainer.errors import UsageError
from explainer.model.interfaces import SupportsPP, supports_pp, supports_pp_attributes, supports_pp_inspect

POST, PRE = "diffusion-gemma-tiny", "diffusion-gemma-tiny@pre-45828"
VLLM_MESSAGE = ("Pipeline parallelism is not supported for this model. "
                "Supported models implement the `SupportsPP` interface.")


# ---- supports_pp: every case of vLLM's two halves -----------------------------------------------------
class Full(nn.Module, SupportsPP):
    def make_empty_intermediate_tensors(self, batch_size, dtype, device): ...
    def forward(self, input_ids, positions, intermediate_tensors=None): ...


class FlagOnly(nn.Module):
    supports_pp = True
    def forward(self, input_ids, positions, intermediate_tensors=None): ...


class MethodOnly(nn.Module):
    def make_empty_intermediate_tensors(self, batch_size, dtype, device): ...
    def forward(self, input_ids, positions, intermediate_tensors=None): ...


class NoKwarg(nn.Module, SupportsPP):
    def make_empty_intermediate_tensors(self, batch_size, dtype, device): ...
    def forward(self, input_ids, positions): ...


class VarKw(nn.Module, SupportsPP):
    def make_empty_intermediate_tensors(self, batch_size, dtype, device): ...
    def forward(self, input_ids, positions, **kwargs): ...


class Plain(nn.Module):
    def forward(self, input_ids, positions): ...


@pytest.mark.parametrize("cls, attrs, inspect_, expected, warning", [
    (Full, True, True, True, None),
    (VarKw, True, True, True, None),
    (FlagOnly, False, True, False, "sets `supports_pp=True`, but is missing PP-specific attributes: "
                                   "('make_empty_intermediate_tensors',)"),
    (MethodOnly, False, True, False, "contains all PP-specific attributes, but does not set `supports_pp=True`."),
    (NoKwarg, True, False, False, "sets `supports_pp=True`, but does not accept `intermediate_tensors` "
                                  "in its `forward` method"),
    (Plain, False, False, False, None),
])
def test_supports_pp_halves_and_warnings(caplog, cls, attrs, inspect_, expected, warning):
    assert supports_pp_attributes(cls) is attrs
    assert supports_pp_inspect(cls) is inspect_
    with caplog.at_level(logging.WARNING, logger="explainer.model.interfaces"):
        assert supports_pp(cls) is expected
    messages = [r.getMessage() for r in caplog.records]
    if warning is None:
        assert messages == []
    else:
        assert len(messages) == 1 and warning in messages[0] and cls.__name__ in messages[0]


def test_supports_pp_on_an_instance():
    assert supports_pp(Full()) is True
    assert supports_pp(Plain()) is False


def test_registered_variants_differ_only_in_the_attribute_half():
    post = registry.ModelRegistry.resolve_model_cls(POST)
    pre = registry.ModelRegistry.resolve_model_cls(PRE)
    assert post.__name__ == "DiffusionGemmaForConditionalGeneration"
    assert supports_pp_inspect(post) and not supports_pp_attributes(post)   # forward still takes it
    assert supports_pp_inspect(pre) and supports_pp_attributes(pre)
    assert registry.ModelRegistry.is_pp_supported_model(POST) is False
    assert registry.ModelRegistry.is_pp_supported_model(PRE) is True
    assert registry._ModelInfo.from_model_cls(post) == registry._ModelInfo(post.__name__, False)


def test_registry_never_instantiates(monkeypatch):
    built = []
    for cls in (registry.DiffusionGemmaForConditionalGeneration,
                registry.PreFixDiffusionGemmaForConditionalGeneration):
        monkeypatch.setattr(cls, "__init__", lambda self, *a, **k: built.append(1))
    registry._inspect.cache_clear()
    assert registry.ModelRegistry.inspect_model_cls(PRE).supports_pp is True
    assert registry.ModelRegistry.inspect_model_cls(POST).supports_pp is False
    assert built == []


def test_unknown_model_lists_known_names():
    with pytest.raises(UsageError) as exc:
        EngineConfig(model="gemma-7b")
    assert "'gemma-7b'" in str(exc.value) and POST in str(exc.value) and PRE in str(exc.value)


# ---- the startup check -----------------------------------------------------------------------------------
@pytest.fixture
def constructions(monkeypatch):
    """Count every rank-side object the engine could build: runners, models, groups, warmups."""
    counts = {"runner": 0, "model": 0, "world": 0, "group": 0, "warmup": 0}

    def counting(cls, key):
        original = cls.__init__

        def init(self, *a, **k):
            counts[key] += 1
            original(self, *a, **k)
        monkeypatch.setattr(cls, "__init__", init)

    counting(runner.ModelRunner, "runner")
    counting(registry.DiffusionGemmaForConditionalGeneration, "model")
    counting(inprocess.InProcessWorld, "world")
    counting(inprocess.InProcessPPGroup, "group")
    original_warmup = executor_mod.warmup_kernels
    monkeypatch.setattr(executor_mod, "warmup_kernels",
                        lambda *a, **k: (counts.__setitem__("warmup", counts["warmup"] + 1), original_warmup(*a, **k)))
    return counts


def test_pp2_rejected_before_anything_exists(constructions):
    children = multiprocessing.active_children()
    with pytest.raises(PipelineParallelNotSupportedError) as exc:
        engine_mod.LLMEngine.from_engine_args(model=POST, pipeline_parallel_size=2)
    assert str(exc.value) == VLLM_MESSAGE == PP_NOT_SUPPORTED_MESSAGE
    assert isinstance(exc.value, NotImplementedError) and isinstance(exc.value, ValueError)
    assert constructions == {"runner": 0, "model": 0, "world": 0, "group": 0, "warmup": 0}
    assert multiprocessing.active_children() == children


def test_pp2_pre_fix_passes_the_check_and_builds_ranks(constructions):
    cfg = EngineConfig(model=PRE, pipeline_parallel_size=2, pp_mode="state-sync")
    assert cfg.pipeline_parallel_size == 2 and constructions["runner"] == 0
    engine_mod.LLMEngine(cfg)
    assert constructions["runner"] == 2 and constructions["model"] == 2 and constructions["world"] == 1
    assert constructions["warmup"] == 1


def test_pp1_works_on_the_post_fix_model(constructions):
    cfg = EngineConfig(model=POST, pipeline_parallel_size=1)
    assert (cfg.canvas_length, cfg.max_denoising_steps, cfg.max_num_seqs) == (8, 48, 8)
    out = engine_mod.LLMEngine(cfg).generate([task.encode("451")], max_tokens=32, seeds=[0])
    assert task.decode(out[0].output_token_ids) == task.spell(451) and constructions["runner"] == 1


def test_rejection_is_caught_as_either_type():
    for catch in (NotImplementedError, ValueError):
        with pytest.raises(catch, match="SupportsPP"):
            EngineConfig(model=POST, pipeline_parallel_size=3)


@pytest.mark.parametrize("pp", [1, 2])
@pytest.mark.parametrize("backend", ["flashinfer", "FLASHINFER"])
def test_flashinfer_rejected_first_even_at_pp1(pp, backend):
    with pytest.raises(ValueError) as exc:
        EngineConfig(model=POST, pipeline_parallel_size=pp, attention_backend=backend)
    assert str(exc.value) == FLASHINFER_MESSAGE
    assert not isinstance(exc.value, NotImplementedError)       # the model hook runs before the PP check


@pytest.mark.parametrize("kwargs, needle", [
    ({"pipeline_parallel_size": 0}, "pipeline_parallel_size=0 is out of range"),
    ({"pipeline_parallel_size": -1}, "accepted: integers >= 1"),
    ({"pipeline_parallel_size": "2"}, "must be an integer"),
    ({"pipeline_parallel_size": 2.0}, "must be an integer"),
    ({"pipeline_parallel_size": True}, "must be an integer"),
    ({"model": PRE, "pipeline_parallel_size": 5}, "more stages than the model's 4 layers; accepted: 1..4"),
    ({"max_num_seqs": 0}, "max_num_seqs=0"),
    ({"canvas_length": 0}, "canvas_length=0"),
    ({"canvas_length": -8}, "canvas_length=-8"),
    ({"max_denoising_steps": 0}, "max_denoising_steps=0"),
    ({"pp_mode": "naive"}, "accepted: generic, generic-int64, state-sync"),
    ({"distributed_executor_backend": "ray"}, "accepted: inprocess, processes"),
    ({"attention_backend": "xformers"}, "accepted: FLASH_ATTN"),
    ({"entropy_bound": 0}, "entropy_bound must be a positive float"),
    ({"t_min": 0.9}, "t_max=0.8 must be > t_min=0.9"),
    ({"max_num_batched_tokens": 4}, "cannot hold one canvas"),
])
def test_bad_values_name_value_and_range(kwargs, needle):
    with pytest.raises(UsageError) as exc:
        EngineConfig(**kwargs)
    assert needle in str(exc.value)


def test_gating_runs_first_on_the_processes_backend_too(constructions):
    with pytest.raises(PipelineParallelNotSupportedError):
        engine_mod.LLMEngine.from_engine_args(model=POST, pipeline_parallel_size=2,
                                              distributed_executor_backend="processes")
    engine = engine_mod.LLMEngine.from_engine_args(model=PRE, pipeline_parallel_size=2,
                                                   distributed_executor_backend="processes")
    assert engine.processes_started == 0 and constructions["runner"] == 0   # ranks start with generate()
    with pytest.raises(UsageError, match="use the 'inprocess' backend"):
        engine.step()


def test_startup_check_is_traced():
    from explainer.trace import Trace
    trace = Trace()
    with pytest.raises(PipelineParallelNotSupportedError):
        engine_mod.LLMEngine.from_engine_args(trace, model=POST, pipeline_parallel_size=2)
    (event,) = trace.events
    assert event.phase == "startup-check" and event.rank is None
    assert event.data["error"] == {"type": "NotImplementedError", "message": VLLM_MESSAGE}
    assert event.data["processes_started"] == 0


def test_checkpoint_metadata_is_cached():
    assert config_mod.checkpoint_metadata() is config_mod.checkpoint_metadata()
