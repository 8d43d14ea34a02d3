"""The worker layer (vLLM ``v1/worker/gpu/``): each PP rank's model runner with its own copy of the request
state, the model state and ``DiffusionSampler`` of DiffusionGemma, the PP handler (the synchronous #33960 one
in ``pp_utils``, the asynchronous #42187 one in ``pp_async``) and warmup.
"""
