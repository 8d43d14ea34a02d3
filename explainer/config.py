"""Engine configuration and the startup check (vLLM ``config/vllm.py`` + ``config/model.py``).

``EngineConfig.__post_init__`` runs in vLLM's order, before any rank, runner, group or process exists:

1. plain values (types and ranges: ``UsageError`` naming the value and the accepted range);
2. the model-specific hook (vLLM ``DiffusionGemmaModelForBlockDiffusionConfig.verify_and_update_config``):
   ``attention_backend="flashinfer"`` -> vLLM's ``ValueError``; defaults for canvas length, denoising
   steps and ``max_num_seqs`` (8). The toy also fills in the sampler settings here (``entropy_bound``,
   ``t_min``/``t_max``, thresholds, from the generation config; range-checked in step 1). vLLM does not:
   it reads them when it builds the ``DiffusionSampler`` (``custom_sampler``, worker ``load_model``,
   last PP rank only), so in vLLM a bad ``entropy_bound`` fails at worker load, not at this check;
3. ``verify_with_parallel_config`` (vLLM ``ModelConfig.verify_with_parallel_config``): PP > 1 on a model
   whose class does not implement ``SupportsPP`` raises ``PipelineParallelNotSupportedError`` with vLLM's
   message;
4. ``verify_stages_fit_layers``, the toy's own (vLLM's ``verify_with_parallel_config`` has no such check): the
   stage count must not exceed the layer count, since the toy gives every stage at least one layer.

Four switches choose between vLLM's behaviour and the historic or reference one: ``pp_schedule``
(``sync``, #33960 | ``async``, #42187, as 0.32.0 runs it), ``pp_transfer`` (``async``, 0.32.0's worker |
``blocking``, each stage-to-stage send and receive waited at once, as ``parallel_state.py`` at ``0c175ae``),
``sampler_draw`` (``multinomial``, transformers | ``gumbel``,
vLLM's ``DiffusionSampler``) and ``self_conditioning`` (``hf`` | ``vllm``). The defaults (sync,
multinomial, hf) keep the engine at PP=1 token-identical to transformers' ``generate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from explainer.errors import UsageError
from explainer.model.checkpoint import metadata
from explainer.model.registry import DEFAULT_MODEL, ModelRegistry
from explainer.validation import check_int, check_one_of, is_number
from explainer.vocab import (COMM_GATES, EXECUTOR_BACKENDS, PP_MODES, PP_SCHEDULES, PP_TRANSFERS, REQUEST_STATE_FIELDS, SAMPLER_DRAWS,
                             SELF_CONDITIONING_MODES, STATE_SYNC_FIELDS)

ATTENTION_BACKENDS = ("FLASH_ATTN", "TRITON_ATTN", "TORCH_SDPA", "FLASHINFER")
DEFAULT_MAX_NUM_SEQS = 8   # vLLM lowers max_num_seqs to 8 for DiffusionGemma when the user did not set it

PP_NOT_SUPPORTED_MESSAGE = ("Pipeline parallelism is not supported for this model. "
                            "Supported models implement the `SupportsPP` interface.")
FLASHINFER_MESSAGE = ("FlashInfer does not support DiffusionGemma's mixed causal/bidirectional attention. "
                      "Use --attention-backend FLASH_ATTN or TRITON_ATTN instead.")


class PipelineParallelNotSupportedError(NotImplementedError, ValueError):
    """vLLM's code raises ``NotImplementedError``; PR #45828's text says ``ValueError``: this is both.

    ``type_name`` is what reports print (``engine.errors.error_summary``): vLLM's class, not this subclass."""

    type_name = "NotImplementedError"


@lru_cache(maxsize=1)
def checkpoint_metadata() -> dict:
    """The shipped checkpoint's config + generation config (a small JSON read, no weights)."""
    return metadata()


@dataclass
class EngineConfig:
    model: str = DEFAULT_MODEL
    pipeline_parallel_size: int = 1
    canvas_length: int | None = None          # None: the checkpoint's canvas length
    max_denoising_steps: int | None = None    # None: generation config, else 48
    max_num_seqs: int | None = None           # None: 8
    max_num_batched_tokens: int = 512         # per step; sizes each rank's persistent receive buffer
    seed: int = 0
    pp_mode: str = "generic"                  # generic | generic-int64 | state-sync (PR #52015)
    pp_schedule: str = "sync"                 # sync (#33960) | async (#42187: pp_size batches in flight)
    pp_transfer: str = "async"                # async (0.32.0's worker: isend/irecv) | blocking (0c175ae's form)
    sampler_draw: str = "multinomial"         # multinomial (HF-exact, default) | gumbel (vLLM's draw)
    self_conditioning: str = "hf"             # hf (default) | vllm (SC MLP on every decode request)
    attention_backend: str | None = None
    distributed_executor_backend: str = "inprocess"
    comm_gate: str = "post-40150"             # real groups (processes, hosts): use_cpu_custom_send_recv's gate
    warmup: bool = True
    entropy_bound: float | None = None        # sampler settings; None: the generation config
    t_min: float | None = None
    t_max: float | None = None
    stability_threshold: int | None = None
    confidence_threshold: float | None = None
    sync_fields: tuple[str, ...] | None = None   # state-sync: fields the last rank sends (None: #52015's three)

    def __post_init__(self):
        self._verify_values()
        self._verify_and_update_model_config()
        self.verify_with_parallel_config()
        self.verify_stages_fit_layers()

    # 1. plain values
    def _verify_values(self) -> None:
        ModelRegistry.resolve_model_cls(self.model)          # unknown name -> UsageError listing known
        check_int("pipeline_parallel_size", self.pipeline_parallel_size, 1)
        for name in ("canvas_length", "max_denoising_steps", "max_num_seqs", "max_num_batched_tokens"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), 1)
        check_int("seed", self.seed, 0)
        check_one_of("pp_mode", self.pp_mode, PP_MODES)
        check_one_of("pp_schedule", self.pp_schedule, PP_SCHEDULES)
        check_one_of("pp_transfer", self.pp_transfer, PP_TRANSFERS)
        check_one_of("sampler_draw", self.sampler_draw, SAMPLER_DRAWS)
        check_one_of("self_conditioning", self.self_conditioning, SELF_CONDITIONING_MODES)
        check_one_of("distributed_executor_backend", self.distributed_executor_backend, EXECUTOR_BACKENDS)
        check_one_of("comm_gate", self.comm_gate, COMM_GATES)
        if self.attention_backend is not None:
            check_one_of("attention_backend", str(self.attention_backend).upper(), ATTENTION_BACKENDS)
        if self.entropy_bound is not None and not (is_number(self.entropy_bound) and self.entropy_bound > 0):
            raise UsageError(f"entropy_bound must be a positive float (got {self.entropy_bound!r})")
        for name in ("t_min", "t_max"):
            if getattr(self, name) is not None and not (is_number(getattr(self, name)) and getattr(self, name) >= 0):
                raise UsageError(f"{name}={getattr(self, name)!r}: must be a finite number >= 0")
        if self.stability_threshold is not None:
            check_int("stability_threshold", self.stability_threshold, 0)
        if self.confidence_threshold is not None and not (
                is_number(self.confidence_threshold) and self.confidence_threshold > 0):
            raise UsageError(f"confidence_threshold={self.confidence_threshold!r}: must be a number > 0")
        self._verify_sync_fields()

    def _verify_sync_fields(self) -> None:
        """``sync_fields``: any subset of the per-request state fields (``vocab.REQUEST_STATE_FIELDS``), state-sync
        only; sorted."""
        if self.sync_fields is None:
            self.sync_fields = STATE_SYNC_FIELDS if self.pp_mode == "state-sync" else ()
            return
        if self.pp_mode != "state-sync":
            raise UsageError(f"sync_fields={self.sync_fields!r} needs pp_mode='state-sync' (got {self.pp_mode!r})")
        if self.pp_schedule == "async" and set(self.sync_fields) != set(STATE_SYNC_FIELDS):
            # the async back-channel (pp_async.py) carries #52015's three fields; a subset is a sync-schedule knob
            raise UsageError(f"sync_fields={self.sync_fields!r} needs pp_schedule='sync'; the async schedule syncs "
                             f"{', '.join(STATE_SYNC_FIELDS)}")
        valid = REQUEST_STATE_FIELDS
        if isinstance(self.sync_fields, str) or not all(isinstance(f, str) for f in self.sync_fields):
            raise UsageError(f"sync_fields={self.sync_fields!r}: accepted is a collection of field names from "
                             f"{', '.join(valid)}")
        unknown = sorted(set(self.sync_fields) - set(valid))
        if unknown:
            raise UsageError(f"unknown state field(s) {', '.join(map(repr, unknown))}; accepted: {', '.join(valid)}")
        self.sync_fields = tuple(sorted(set(self.sync_fields)))

    # 2. the model-specific hook (runs before the PP check, as in VllmConfig.__post_init__)
    def _verify_and_update_model_config(self) -> None:
        if self.attention_backend is not None and str(self.attention_backend).upper() == "FLASHINFER":
            raise ValueError(FLASHINFER_MESSAGE)
        meta = checkpoint_metadata()
        gen = meta.get("generation_config", {})
        if self.canvas_length is None:
            self.canvas_length = int(meta["config"]["canvas_length"])
        if self.max_denoising_steps is None:
            self.max_denoising_steps = int(gen.get("max_denoising_steps") or 48)
        if self.max_num_seqs is None:
            self.max_num_seqs = DEFAULT_MAX_NUM_SEQS
        defaults = {"entropy_bound": 0.1, "t_min": 0.4, "t_max": 0.8, "stability_threshold": 1,
                    "confidence_threshold": 0.005}
        for name, fallback in defaults.items():
            if getattr(self, name) is None:
                setattr(self, name, gen.get(name, fallback))
        if self.max_num_batched_tokens < self.canvas_length:
            raise UsageError(f"max_num_batched_tokens={self.max_num_batched_tokens} cannot hold one canvas; "
                             f"accepted: >= canvas_length ({self.canvas_length})")
        if not self.t_max > self.t_min:
            raise UsageError(f"t_max={self.t_max!r} must be > t_min={self.t_min!r} (accepted: 0 <= t_min < t_max)")

    # 3. vLLM ModelConfig.verify_with_parallel_config
    def verify_with_parallel_config(self) -> None:
        pp = self.pipeline_parallel_size
        if pp > 1 and not ModelRegistry.is_pp_supported_model(self.model):
            raise PipelineParallelNotSupportedError(PP_NOT_SUPPORTED_MESSAGE)

    # 4. the toy's own: every stage holds at least one layer (not a vLLM check)
    def verify_stages_fit_layers(self) -> None:
        pp, layers = self.pipeline_parallel_size, self.num_hidden_layers
        if pp > layers:
            raise UsageError(f"pipeline_parallel_size={pp} gives more stages than the model's {layers} layers; "
                             f"accepted: 1..{layers}")

    # --- derived ---
    @property
    def model_config(self) -> dict:
        return checkpoint_metadata()["config"]

    @property
    def num_hidden_layers(self) -> int:
        return int(self.model_config["num_hidden_layers"])

    @property
    def vocab_size(self) -> int:
        return int(self.model_config["vocab_size"])

    @property
    def hidden_size(self) -> int:
        return int(self.model_config["hidden_size"])

    @property
    def eos_token_id(self) -> int:
        return int(self.model_config["eos_token_id"])

    @property
    def num_speculative_tokens(self) -> int:
        """vLLM reuses the spec-decode path: one step schedules ``canvas_length`` draft tokens."""
        return self.canvas_length

