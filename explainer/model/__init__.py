"""The model layer: the tiny DiffusionGemma backbone (``diffusion_gemma`` with ``layers``, ``stages``,
``kv_cache``, ``tiny_config``), its shipped ``checkpoint``, the ``CachedLM`` the sampler drives, vLLM's
``interfaces`` (``SupportsPP``) and model ``registry``, the ``task`` it was trained on, and the training
``objective`` and ``train`` command; ``hf_tiny`` builds a tiny random transformers model for the
conformance checks.
"""
