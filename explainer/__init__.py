# -*- coding: utf-8 -*-  (so even Python 2 reaches __main__.py's one-line "needs Python 3.10")
"""explainer: run, step through and see two real vLLM fixes at toy scale.

1. vLLM PR #45828 — DiffusionGemma withdraws ``SupportsPP`` so pipeline parallelism is rejected at startup.
2. vLLM PR #40150 — the CPU communicator gates its tensor-dict fast path on ``supports_tensor_dict``.
"""

__version__ = "0.1.0"
