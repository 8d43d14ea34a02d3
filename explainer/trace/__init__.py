"""The trace of a run: every event (rank, step, phase, the tensors it moved, each rank's view of the state),
the divergence analysis (``events``) and the pipeline timeline read from it (``timeline``).

The lowest layer with ``errors`` and ``vocab``: it imports nothing else of the package, and the engine,
scenarios, renderers and widgets all read it. ``Trace`` and its record types are re-exported here.
"""

from explainer.trace.events import EXECUTE_PHASES, PHASES, SAMPLE_PHASES, Event, Trace, Transfer

__all__ = ["Trace", "Event", "Transfer", "PHASES", "EXECUTE_PHASES", "SAMPLE_PHASES"]
