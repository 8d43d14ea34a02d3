"""Conformance: the toy against the real vLLM (``.venv-vllm``) on the same inputs (``python -m explainer conformance``).

Each row runs the toy here and the real vLLM in ``.venv-vllm`` (``explainer.vllm_env``), then compares the fields
both sides must agree on. ``rows.py`` the row and its comparison; ``gate_rows.py`` the PP startup gate (#45828);
``comm_rows.py`` the CPU communicator (#40150) on one node, two idents, two hosts and one shared ident;
``drift.py`` the texts the package quotes, read from the installed vLLM's source; ``report.py`` all of them.
"""
