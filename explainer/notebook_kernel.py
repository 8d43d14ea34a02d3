"""The Jupyter kernel set-up installs: ipykernel's, reporting the language version every Python 3 shares.

When a kernel starts, JupyterLab 4 writes the kernel's ``language_info`` into the open notebook; unless it equals
the stored value, the notebook is marked modified, closing asks to save it and the autosave rewrites it. ipykernel
reports the interpreter's patch release (``sys.version``: 3.11.2 on Debian 12, 3.11.7 elsewhere), so a notebook
stored on one Python changed as soon as it opened on another. This kernel reports ``version`` "3", as the stored
notebooks do (``explainer.notebook_file.stored_language_info``). Set-up selects it for the venv's kernels in
``$VENV/etc/ipython/ipython_kernel_config.json`` (``IPKernelApp.kernel_class``).
"""

from __future__ import annotations

from ipykernel.ipkernel import IPythonKernel

from explainer.notebook_file import stored_language_info


class NotebookKernel(IPythonKernel):
    """ipykernel's IPython kernel; only the reported ``language_info.version`` differs."""

    language_info = stored_language_info(IPythonKernel.language_info)
