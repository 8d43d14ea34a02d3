"""The engine layer (vLLM ``v1/core/sched/``, ``v1/executor/``, ``v1/engine/``): the scheduler, the executors
that drive the per-rank runners (in this process, one process per rank, or on two hosts), the PP schedule,
the startup check and ``LLMEngine``.
"""
