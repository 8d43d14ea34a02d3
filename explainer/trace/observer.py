"""``RankObserver``: what one rank's worker code tells the trace, and how the trace records it.

The mechanism (``explainer/worker/``) reads like vLLM's: at each phase boundary it makes one call here with the
values it already holds (``observer.enter("recv")``, ``observer.prepared(batch, causal)``, ...) and builds no
description, transfer list or view itself. This observer keeps the rank's current phase (where a failure
happened: the executor reports it), turns the values into the trace's events (text, the state fields read, the
tensors moved with their bytes) and snapshots the rank's view of the state. A ``Trace(enabled=False)`` records
nothing, the phase is still kept.

Duck-typed on purpose: the trace layer imports nothing of the package, so ``batch``, ``pending`` and the
runner are read by attribute (``req_ids``, ``query_lens``, ``is_decode``; ``model_state.req_states``, ...).
"""

from __future__ import annotations

from explainer.trace.events import Trace, Transfer


class RankObserver:
    """One rank's observer: ``trace.record`` calls with the text the notebooks show, and the phase."""

    def __init__(self, trace: Trace, rank: int, *, first_rank: bool = False, world_size: int = 1):
        self.trace, self.rank, self.first_rank, self.world_size = trace, rank, first_rank, world_size
        self.phase = "startup"

    def enter(self, phase: str) -> None:
        """The phase the rank is in from now on (where an exception would be reported)."""
        self.phase = phase

    # ---- the runner ------------------------------------------------------------------------------
    def loaded(self, runner, start_layer: int, end_layer: int) -> None:
        """The runner built its slice of layers; its state is snapshotted from now on."""
        self.trace.meta.setdefault("layers", {})[str(self.rank)] = [start_layer, end_layer]
        self.trace.attach(self.rank, lambda: view(runner))

    def step(self, step: int, warmup: bool) -> None:
        self.trace.set_step(step, warmup)
        self.phase = "prepare"

    def resume(self, step: int) -> None:
        """Back to ``step`` (its sample half runs after other steps' events on the async schedule)."""
        self.trace.set_step(step, self.trace.warmup)

    def prepared(self, batch, causal: list[bool]) -> None:
        """Inputs built: every rank read ``is_encoder_phase``; the first rank also the canvas and the SC embeds."""
        reads = {rid: ["is_encoder_phase"] + (["draft_tokens", "self_conditioning_embeds"] if self.first_rank and d
                                              else [])
                 for rid, d in zip(batch.req_ids, batch.is_decode)}
        parts = []
        for rid, n, d, c in zip(batch.req_ids, batch.query_lens, batch.is_decode, causal):
            kind = ("commit" if c else "denoise") if d else "prefill"
            parts.append(f"{rid}: {kind} {n} tokens, {'causal' if c else 'bidirectional'}")
        self.trace.record(self.rank, "prepare", "; ".join(parts), reads=reads)

    def received_stage(self, num_tokens: int) -> None:
        self.trace.record(self.rank, "recv", f"IntermediateTensors <- rank {self.rank - 1}, "
                          f"copied into the persistent buffer ({num_tokens} tokens)")

    def forwarded(self, start_layer: int, end_layer: int, num_tokens: int) -> None:
        self.trace.record(self.rank, "forward", f"layers [{start_layer}, {end_layer}) over {num_tokens} tokens")

    def sent_stage(self, tensors: dict) -> None:
        dst = self.rank + 1
        self.trace.record(self.rank, "send", f"IntermediateTensors -> rank {dst}",
                          transfers=[Transfer.of_tensor(self.rank, dst, k, v, "send") for k, v in tensors.items()])

    def sampled(self, batch, sampled, num_sampled, actions: dict) -> None:
        emitted = {rid: sampled[i, :int(num_sampled[i])].tolist()
                   for i, rid in enumerate(batch.req_ids) if int(num_sampled[i])}
        self.trace.record(self.rank, "sample", "; ".join(f"{r}: {a}" for r, a in actions.items()),
                          data={"emitted": emitted, "actions": actions,
                                "sampled_dtype": str(sampled.dtype).removeprefix("torch.")})

    # ---- the back-channel ------------------------------------------------------------------------------
    def broadcast_sent(self, label: str, broadcast: dict, to_first: dict | None = None, consumed_later: int = 0):
        """The last rank's back-channel: ``broadcast`` to every other rank, ``to_first`` to rank 0 only."""
        last = self.rank
        transfers = [Transfer.of_tensor(last, r, name, t, "broadcast") for name, t in broadcast.items()
                     for r in range(last)]
        transfers += [Transfer.of_tensor(last, 0, name, t, "send") for name, t in (to_first or {}).items()]
        later = f"; consumed there {consumed_later} steps later" if consumed_later else ""
        self.trace.record(self.rank, "broadcast", f"back-channel ({label}) -> ranks 0..{last - 1}{later}",
                          transfers=transfers)

    def broadcast_skipped(self) -> None:
        self.trace.record(self.rank, "broadcast", "compute_need_sampled_mask is None: no request finishes a prefill or "
                          "decodes, the broadcast returns early", data={"skipped": True})

    def received_back_channel(self, names) -> None:
        self.trace.record(self.rank, "receive", f"back-channel <- rank {self.world_size - 1}: {', '.join(names)}; "
                          "post_update")

    def posted_receive(self, step: int, posted: bool) -> None:
        when = f"consumed {self.world_size} steps later" if posted else "mask None: no collective"
        self.trace.record(self.rank, "receive", f"receive posted for step {step} ({when}); "
                          f"num_computed_tokens advanced optimistically", data={"posted": posted})

    def delivered(self, step: int, names) -> None:
        self.trace.set_step(step, self.trace.warmup)          # recorded under the step it belongs to
        self.trace.record(self.rank, "receive", f"back-channel for step {step} delivered (side stream): "
                          f"{', '.join(names)}", data={"delivered_step": step})

    def consumed(self, step: int, applied: list[str], req_ids: list[str]) -> None:
        self.trace.record(self.rank, "consume", f"step {step}'s back-channel, consumed {self.world_size} steps "
                          f"later: {', '.join(applied)} for {', '.join(req_ids)}",
                          data={"consumed_step": step, "applied": applied})


class WarmupObserver:
    """The engine-level events of ``warmup_kernels`` (rank None: no rank acts)."""

    def __init__(self, trace: Trace):
        self.trace = trace

    def started(self, num_reqs: int, prompt_len: int, decode_steps: int, canvas_length: int) -> None:
        self.trace.set_step(0, warmup=True)
        self.trace.record(None, "warmup", f"warmup_kernels: {num_reqs} fake requests with {prompt_len}-token prompts "
                          f"(CL + 1), 1 prefill step, {decode_steps} decode steps with placeholder drafts "
                          f"[0]*{canvas_length}")

    def done(self, req_ids: list[str]) -> None:
        self.trace.record(None, "warmup", f"warmup done: {', '.join(req_ids)} finished and removed")


def view(runner) -> dict:
    """A rank's view of each request, as the trace keeps it: canvas ids, ``draft_tokens``, ``is_encoder_phase``,
    the norm of ``self_conditioning_embeds``, ``step`` and ``num_computed_tokens``."""
    st, rs = runner.model_state.req_states, runner.req_states
    return {rid: {"canvas": st.canvas[s].tolist(), "draft_tokens": rs.draft_tokens[s].tolist(),
                  "is_encoder_phase": bool(st.is_encoder_phase[s]),
                  "self_conditioning_embeds": round(float(st.self_conditioning_embeds[s].norm()), 5),
                  "step": int(st.step[s]), "num_computed_tokens": int(rs.num_computed_tokens[s])}
            for rid, s in rs.req_id_to_slot.items()}
