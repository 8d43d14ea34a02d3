"""How a run's trace is taken: from outside the mechanism, at two boundaries.

* The process-group boundary: ``RecordingGroup`` wraps a rank's PP group (``GroupCoordinator`` or the in-process
  group) and notes every tensor that crosses it (``send_tensor_dict``/``isend_tensor_dict``, their receives,
  ``broadcast``), with the names of a tensor dict's keys; a back-channel broadcast is named by its place in the
  payload the rank's PP handler declares (``broadcast_names``).
* Between the executor's calls: ``RankRecorder`` has the ``Worker``'s interface (``execute_model``,
  ``sample_tokens``, ``delivered_output``). After each call it turns what it saw into the trace's events: the
  scheduler's input, the runner's output, what crossed the group, and the rank's view of the state, which it asks
  the runner for (``state_view``, and what the step's sampler returned: ``sampler_output``). On an exception it
  records what completed before the failing call, then re-raises; ``failure_phase`` names that call.

Duck-typed on purpose: the trace layer imports nothing of the package, so groups, workers and outputs are read by
their public attributes. The mechanism (``explainer/worker/``, ``engine/core.py``, ``distributed/parallel_state.py``)
makes no call here.
"""

from __future__ import annotations

from explainer.trace.events import Trace, Transfer

# the mechanism's calls, outermost first, and the phase a failure inside them is reported in
CALL_PHASES = {"update_pp_decode_requests": "consume", "recv_intermediate_tensors": "recv", "wait_for_comm": "recv",
               "forward": "forward", "isend_tensor_dict": "send", "sample": "sample", "broadcast": "broadcast",
               "broadcast_async": "broadcast", "send_state": "broadcast", "receive": "receive",
               "recv_state": "receive", "post_receive": "receive", "deliver": "receive"}
CALL_DEFAULT = {"execute_model": "prepare", "sample_tokens": "sample", "delivered_output": "receive"}
EXECUTE_EVENTS = ("consume", "prepare", "recv", "forward", "send")
SAMPLE_EVENTS = ("sample", "broadcast", "receive")


def failure_phase(exc: BaseException, call: str, is_last_rank: bool = True) -> str:
    """The phase a failure of ``call`` (``execute_model``, ``sample_tokens``, ``delivered_output``) happened in:
    the outermost mechanism call of the traceback that names one (vLLM's method names), else the call's own."""
    tb = exc.__traceback__
    while tb is not None:
        phase = CALL_PHASES.get(tb.tb_frame.f_code.co_name)
        if phase is not None:
            return phase
        tb = tb.tb_next
    return CALL_DEFAULT[call] if call != "sample_tokens" or is_last_rank else "receive"


class RecordingGroup:
    """A PP group, recorded: every call goes to ``group``; each tensor that crosses is noted in ``log``
    (``(op, peer, {name: tensor})``, op ``send`` | ``recv`` | ``broadcast``). Everything else is the group's."""

    def __init__(self, group, log: list | None = None):
        self.group, self.log = group, ([] if log is None else log)

    def __getattr__(self, name: str):
        return getattr(self.group, name)

    def make_sibling_device_group(self, group_desc: str) -> "RecordingGroup":
        return RecordingGroup(self.group.make_sibling_device_group(group_desc), self.log)

    def send_tensor_dict(self, tensor_dict: dict, dst: int | None = None):
        out = self.group.send_tensor_dict(tensor_dict, dst)
        self.log.append(("send", dst, dict(tensor_dict)))
        return out

    def isend_tensor_dict(self, tensor_dict: dict, dst: int | None = None):
        handles = self.group.isend_tensor_dict(tensor_dict, dst)
        self.log.append(("send", dst, dict(tensor_dict)))
        return handles

    def recv_tensor_dict(self, src: int | None = None):
        tensor_dict = self.group.recv_tensor_dict(src)
        self.log.append(("recv", src, dict(tensor_dict or {})))
        return tensor_dict

    def irecv_tensor_dict(self, src: int | None = None):
        tensor_dict, handles = self.group.irecv_tensor_dict(src)
        self.log.append(("recv", src, dict(tensor_dict or {})))
        return tensor_dict, handles

    def broadcast(self, tensor, src: int = 0):
        out = self.group.broadcast(tensor, src)
        self.log.append(("broadcast", src, {None: out}))
        return out


class RankRecorder:
    """One rank's ``Worker`` as the executor calls it, with each call's events recorded in ``trace``.
    ``group`` is the ``RecordingGroup`` the worker was built on; ``async_schedule``: the #42187 schedule."""

    def __init__(self, trace: Trace, worker, group: RecordingGroup, *, mode: str, async_schedule: bool = False):
        self.trace, self.worker, self.log = trace, worker, group.log
        self.model_runner = self.runner = worker.model_runner
        self.rank, self.world_size = worker.rank, group.world_size
        self.is_first_rank, self.is_last_rank = worker.is_first_rank, worker.is_last_rank
        self.mode, self.async_schedule = mode, async_schedule
        self.step, self.scheduled = 0, None
        trace.meta.setdefault("layers", {})[str(self.rank)] = [self.runner.start_layer, self.runner.end_layer]
        trace.attach(self.rank, self.runner.state_view)

    # ---- the worker's interface ----------------------------------------------------------------------
    def execute_model(self, scheduler_output) -> None:
        self.step, self.scheduled = scheduler_output.step, scheduler_output
        self.trace.set_step(self.step, scheduler_output.warmup)
        self._call("execute_model", lambda: self.worker.execute_model(scheduler_output), self._executed)

    def sample_tokens(self):
        self.trace.set_step(self.step, self.trace.warmup)    # on the async schedule other steps ran meanwhile
        return self._call("sample_tokens", self.worker.sample_tokens, self._sampled)

    def delivered_output(self, step: int):
        self.trace.set_step(step, self.trace.warmup)          # recorded under the step it belongs to
        return self._call("delivered_output", lambda: self.worker.delivered_output(step),
                          lambda upto, out: self._delivered(step, out))

    def _call(self, call: str, fn, record):
        del self.log[:]
        try:
            out = fn()
        except BaseException as exc:
            record(failure_phase(exc, call, self.is_last_rank), None)
            raise
        record(None, out)
        return out

    # ---- execute_model: consume, prepare, recv, forward, send -----------------------------------------
    def _executed(self, upto: str | None, output) -> None:
        so, events = self.scheduled, []
        consumed = getattr(self.runner, "consumed", None)
        if consumed is not None:
            step, applied, req_ids = consumed
            events.append(("consume", lambda: (f"step {step}'s back-channel, consumed {self.world_size} steps later: "
                                               f"{', '.join(applied)} for {', '.join(req_ids)}",
                                               dict(data={"consumed_step": step, "applied": applied}))))
        if so.num_scheduled_tokens:
            events.append(("prepare", lambda: self._prepare(so)))
            total = sum(so.num_scheduled_tokens.values())
            if not self.is_first_rank:
                events.append(("recv", lambda: (f"IntermediateTensors <- rank {self.rank - 1}, copied into the "
                                                f"persistent buffer ({total} tokens)", {})))
            events.append(("forward", lambda: (f"layers [{self.runner.start_layer}, {self.runner.end_layer}) over "
                                               f"{total} tokens", {})))
            sent = [tensors for op, _, tensors in self.log if op == "send"]
            if sent:
                dst = self.rank + 1
                events.append(("send", lambda: (f"IntermediateTensors -> rank {dst}",
                                                dict(transfers=[Transfer.of_tensor(self.rank, dst, k, v, "send")
                                                                for k, v in sent[0].items()]))))
        self._record(events, upto, EXECUTE_EVENTS)

    def _prepare(self, so) -> tuple[str, dict]:
        """Inputs built: every rank read ``is_encoder_phase``; the first rank also the canvas and the SC embeds."""
        view = self.runner.state_view()
        parts, reads = [], {}
        for rid, n in so.num_scheduled_tokens.items():
            decode, causal = rid in so.scheduled_spec_decode_tokens, view[rid]["is_encoder_phase"]
            kind = ("commit" if causal else "denoise") if decode else "prefill"
            parts.append(f"{rid}: {kind} {n} tokens, {'causal' if causal else 'bidirectional'}")
            reads[rid] = ["is_encoder_phase"] + (["draft_tokens", "self_conditioning_embeds"]
                                                 if self.is_first_rank and decode else [])
        return "; ".join(parts), dict(reads=reads)

    # ---- sample_tokens: sample and broadcast (last rank) or receive --------------------------------------
    def _sampled(self, upto: str | None, output) -> None:
        so = self.scheduled
        if so is None or not so.num_scheduled_tokens:
            return
        if not self.is_last_rank:
            self._record([("receive", self._receive_event)], upto, SAMPLE_EVENTS)
            return
        events = [("sample", self._sample_event)]
        if self.world_size > 1:
            events.append(("broadcast", self._broadcast_event))
        self._record(events, upto, SAMPLE_EVENTS)

    def _sample_event(self):
        out = self.runner.sampler_output
        sampled, num_sampled = out.sampled_token_ids, out.num_sampled
        emitted = {rid: sampled[i, :int(num_sampled[i])].tolist()
                   for i, rid in enumerate(self.scheduled.num_scheduled_tokens) if int(num_sampled[i])}
        return ("; ".join(f"{r}: {a}" for r, a in out.actions.items()),
                dict(data={"emitted": emitted, "actions": out.actions,
                           "sampled_dtype": str(sampled.dtype).removeprefix("torch.")}))

    def _broadcast_event(self):
        last, names = self.rank, self.runner.pp.broadcast_names()
        sent = [t for op, _, d in self.log if op == "broadcast" for t in d.values()]
        if not sent:
            return ("compute_need_sampled_mask is None: no request finishes a prefill or decodes, the broadcast "
                    "returns early", dict(data={"skipped": True}))
        transfers = [Transfer.of_tensor(last, r, name, t, "broadcast") for name, t in zip(names, sent)
                     for r in range(last)]
        transfers += [Transfer.of_tensor(last, 0, name, t, "send")
                      for op, _, d in self.log if op == "send" for name, t in d.items()]
        label = f"{self.mode}, async" if self.async_schedule else self.mode
        later = f"; consumed there {self.world_size} steps later" if self.async_schedule else ""
        return f"back-channel ({label}) -> ranks 0..{last - 1}{later}", dict(transfers=transfers)

    def _received_names(self) -> list[str]:
        names = self.runner.pp.broadcast_names()
        got = [op for op, _, _ in self.log if op == "broadcast"]
        return names[:len(got)] + [k for op, _, d in self.log if op == "recv" for k in d]

    def _receive_event(self):
        if self.async_schedule:
            posted = self.runner.need_sampled_mask is not None
            when = f"consumed {self.world_size} steps later" if posted else "mask None: no collective"
            return (f"receive posted for step {self.step} ({when}); num_computed_tokens advanced optimistically",
                    dict(data={"posted": posted}))
        return f"back-channel <- rank {self.world_size - 1}: {', '.join(self._received_names())}; post_update", {}

    def _delivered(self, step: int, output) -> None:
        if output is not None:
            self.trace.record(self.rank, "receive", f"back-channel for step {step} delivered (side stream): "
                              f"{', '.join(self._received_names())}", data={"delivered_step": step})

    def _record(self, events: list, upto: str | None, order: tuple[str, ...]) -> None:
        """The call's events (phase, what to record) in order; after a failure in phase ``upto``, only those of
        the phases before it."""
        for phase, build in events:
            if upto is not None and (upto not in order or order.index(phase) >= order.index(upto)):
                break
            detail, kw = build()
            self.trace.record(self.rank, phase, detail, **kw)


class WarmupRecorder:
    """The engine-level events around ``warmup_kernels`` (rank None: no rank acts)."""

    def __init__(self, trace: Trace):
        self.trace = trace

    def started(self, num_reqs: int, prompt_len: int, decode_steps: int, canvas_length: int) -> None:
        self.trace.set_step(0, warmup=True)
        self.trace.record(None, "warmup", f"warmup_kernels: {num_reqs} fake requests with {prompt_len}-token prompts "
                          f"(CL + 1), 1 prefill step, {decode_steps} decode steps with placeholder drafts "
                          f"[0]*{canvas_length}")

    def done(self, req_ids: list[str]) -> None:
        self.trace.record(None, "warmup", f"warmup done: {', '.join(req_ids)} finished and removed")
