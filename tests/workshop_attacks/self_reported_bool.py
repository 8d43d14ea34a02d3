"""Attack: the gate returns an int, and the learner's process reports it as a bool: it replaces the exercise's
`answer` (which runs in its own process) with one that says type "bool" whatever the gate returned."""
from explainer.workshop.exercises import tensor_dict_gate as exercise


def use_cpu_custom_send_recv(device_communicator):
    return 1 if device_communicator.backend == "shm" else 0


def _forged(fn, args):
    facts = args.get("facts")
    value = fn(None if facts is None else exercise.Communicator(**facts))
    return {"bool": bool(value), "truth": bool(value), "value": value, "type": "bool", "repr": repr(bool(value))}


exercise.answer = _forged
