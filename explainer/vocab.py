"""The names the layers share, each defined once: engine knobs, communicator gates, request-state fields.

Pure data (imports nothing), so every layer may import it: ``EngineConfig`` checks its knobs against these,
the communicator and the scenarios take the gate names, the worker, the renderers and the workshop take the
state-field names. vLLM spells its own choices as ``Literal`` types in ``vllm/config/``.
"""

# ---- engine knobs (``EngineConfig``) ------------------------------------------------------------------
# The PP back-channel: what #33960 sends | the naive port's int64 cast | + the state open PR #52015 syncs.
PP_MODES = ("generic", "generic-int64", "state-sync")
# The order the notebooks and ``python -m explainer accuracy`` list them: the two that run, then the crash.
PP_MODES_BY_STORY = PP_MODES[1:] + PP_MODES[:1]
PP_SCHEDULES = ("sync", "async")                   # vLLM #33960 (historic) | #42187 (the toy: pp_size batches in flight)
# The stage-to-stage transfer: the worker posts isend/irecv and waits at the next step / first read (vLLM 0.32.0's
# gpu_worker) | every send and receive waited at once (the runner-era blocking form, parallel_state at 0c175ae).
PP_TRANSFERS = ("async", "blocking")
SAMPLER_DRAWS = ("multinomial", "gumbel")          # HF transformers' draw | vLLM DiffusionSampler's Gumbel-max
SELF_CONDITIONING_MODES = ("hf", "vllm")           # SC on denoise inputs only | SC MLP on every request with logits
EXECUTOR_BACKENDS = ("inprocess", "processes", "hosts")   # hosts: two network-namespace hosts (torchrun)

# ---- the CPU communicator ------------------------------------------------------------------------------
ENGINES = ("toy", "vllm")                          # who runs a scenario's ranks: this package | the real vLLM (.venv-vllm)
COMM_GATES = ("pre-40150", "post-40150")           # the PP group's tensor-dict gate, before | after vLLM PR #40150

# ---- per-request state -------------------------------------------------------------------------------
# Every tensor field a rank holds per request (MRV2 ``RequestState`` + ``DiffusionGemmaRequestStates``), sorted:
# the names ``EngineConfig.sync_fields`` and the workshop's ``sync-fields`` exercise accept.
REQUEST_STATE_FIELDS = ("accepted_canvas_history", "accepted_canvas_history_len", "argmax_canvas", "canvas",
                        "confident", "draft_tokens", "is_encoder_phase", "num_computed_tokens", "prompt_len",
                        "self_conditioning_embeds", "step")
# What a non-last rank reads but only the last rank's sampler advances; state sync (PR #52015) sends these.
STATE_SYNC_FIELDS = ("draft_tokens", "is_encoder_phase", "self_conditioning_embeds")
FIRST_RANK_ONLY_FIELDS = ("self_conditioning_embeds",)   # read by prepare_inputs (embed + SC) on the first rank only
# A rank's view of a request in the trace (``ModelRunner.view``), in the order the renderers show it.
VIEW_FIELDS = ("canvas", "draft_tokens", "is_encoder_phase", "self_conditioning_embeds", "step",
               "num_computed_tokens")

# ---- the sampler's accept rule, in the one wording the notebooks, the stepper, the exercise and the glossary use
ACCEPT_RULE = ("Sort the positions by entropy, lowest first; a position is accepted when the entropies sorted "
               "before it sum to at most the bound.")
