"""``Worker``: what vLLM 0.32.0's GPU worker does for PP around its model runner (``v1/worker/gpu_worker.py``,
``Worker.execute_model``), so the runner only runs the model.

One step on a PP rank:

    wait for the previous step's sends              # a forward must not overwrite buffers they still read
    non-first rank: irecv_tensor_dict()             # posted; AsyncIntermediateTensors waits when first read
    output = model_runner.execute_model(scheduler_output, intermediate_tensors)
    non-last rank: isend_tensor_dict(output)        # not waited: the handles are waited at the next step

``sample_tokens`` is the runner's. vLLM 0.32.0 pins: the receive
``0.32.0 v1/worker/gpu_worker.py:1313-1325 AsyncIntermediateTensors(``, the send
``0.32.0 v1/worker/gpu_worker.py:1349-1356 self._pp_send_work = handles[1:]``, the wait
``0.32.0 v1/worker/gpu_worker.py:1307-1310 for handle in self._pp_send_work:``. Before the asynchronous path the runner sent and received
itself, blocking; the messages on the wire are the same. One difference: vLLM keeps only the tensor sends' handles
(``handles[1:]``: the metadata send is reaped by its ``GroupCoordinator``); the toy keeps and waits them all, the
metadata's two sends (its size, then its bytes) included. ``EngineConfig.pp_transfer="blocking"`` selects that
form (every send and receive waited at once, as ``parallel_state.py`` at ``0c175ae`` sent them).
"""

from __future__ import annotations

from explainer.model.stages import IntermediateTensors
from explainer.worker.outputs import ModelRunnerOutput, SchedulerOutput


class AsyncIntermediateTensors(IntermediateTensors):
    """``IntermediateTensors`` whose receive is waited the first time ``tensors`` is read (vLLM's class of the
    same name)."""

    def __init__(self, tensors: dict, comm_handles: list):
        super().__init__(tensors)
        self._comm_handles, self._comm_waited = comm_handles, False

    def wait_for_comm(self) -> None:
        if self._comm_waited:
            return
        for handle in self._comm_handles:
            handle.wait()
        self._comm_waited = True

    def __getattribute__(self, name: str):
        if name == "tensors" and not object.__getattribute__(self, "_comm_waited"):
            object.__getattribute__(self, "wait_for_comm")()
        return object.__getattribute__(self, name)


class Worker:
    """One PP rank: its ``model_runner`` and the stage-to-stage transfers (``runner_cls``: the sync or async
    schedule's runner)."""

    def __init__(self, config, group, runner_cls):
        self.group = group
        self.model_runner = runner_cls(config, group)
        self.blocking = config.pp_transfer == "blocking"     # 0c175ae's form: every transfer waited at once
        self.rank, self.is_first_rank, self.is_last_rank = group.rank_in_group, group.is_first_rank, group.is_last_rank
        self._pp_send_work: list = []

    def execute_model(self, scheduler_output: SchedulerOutput) -> None:
        for handle in self._pp_send_work:
            handle.wait()
        self._pp_send_work = []
        intermediate_tensors = None
        if scheduler_output.num_scheduled_tokens and not self.is_first_rank:
            tensor_dict, handles = self.group.irecv_tensor_dict(src=self.rank - 1)
            intermediate_tensors = AsyncIntermediateTensors(tensor_dict, handles)
            if self.blocking:
                intermediate_tensors.wait_for_comm()
        output = self.model_runner.execute_model(scheduler_output, intermediate_tensors)
        if isinstance(output, IntermediateTensors):   # a non-last rank's stage output
            dst = self.rank + 1
            self._pp_send_work = self.group.isend_tensor_dict(output.tensors, dst=dst)
            if self.blocking:
                for handle in self._pp_send_work:
                    handle.wait()
                self._pp_send_work = []

    def sample_tokens(self) -> ModelRunnerOutput | None:
        return self.model_runner.sample_tokens()

    def delivered_output(self, step: int) -> ModelRunnerOutput | None:
        return self.model_runner.delivered_output(step)
