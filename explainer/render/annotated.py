"""The two fixes as annotated code: vLLM's lines before/after, side by side with the toy's counterpart.

In the style of the Annotated Transformer: a few real lines, then the toy's lines that do the same job.
vLLM's lines are quoted (a few lines, with a link); the toy's are read with ``inspect`` from the running
package, so they cannot drift from what the notebooks execute.

* ``FIX_45828``: ``DiffusionGemmaForConditionalGeneration`` loses ``SupportsPP`` and its
  ``make_empty_intermediate_tensors`` line. Reconstructed from the file before (``cdc8ad9``) and after
  (``00c25c8``, which also contains the later TP fix #46177); the PR's own diff view was not examined.
* ``FIX_40150``: ``GroupCoordinator.use_cpu_custom_send_recv`` asks the communicator instead of the build,
  and ``CpuCommunicator`` gains ``supports_tensor_dict``. The expressions are those of vLLM versions before
  and after the PR: the post-fix gate is vLLM 0.32.0's
  (``0.32.0 distributed/parallel_state.py:574-578 getattr(self.device_communicator, "supports_tensor_dict", False)``);
  the PR's own diff was not examined, so line wrapping here is ours.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from html import escape
from pathlib import Path

from explainer import vllm_release

__all__ = ["Fix", "FIX_45828", "FIX_40150", "toy_source", "annotated_html"]

VLLM = "https://github.com/vllm-project/vllm"


@dataclass(frozen=True)
class Fix:
    pr: int
    title: str
    diff: str                      # unified-diff-style lines: ' ' context, '-' removed, '+' added
    source: str                    # where the lines come from (file + commits), with links
    caveat: str                    # what was not verified
    toy: tuple[tuple[str, str], ...]   # (dotted name of the toy object, optional substring to excerpt around)
    notes: tuple[str, ...]         # one line each: what the toy's lines correspond to


FIX_45828 = Fix(
    pr=45828, title="DiffusionGemma rejects pipeline parallelism: withdraw SupportsPP",
    diff="""\
 # vllm/model_executor/models/diffusion_gemma.py
 class DiffusionGemmaForConditionalGeneration(
     nn.Module,
     SupportsMultiModal,
     SupportsQuant,
-    SupportsPP,
 ):
     ...
     def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
         ...
-        self.make_empty_intermediate_tensors = (
-            self.model.make_empty_intermediate_tensors
-        )
""",
    source=(f'<a href="{VLLM}/blob/cdc8ad9ad156349372e1f05e9e259633c7093601/vllm/model_executor/models/diffusion_gemma.py">'
            f'diffusion_gemma.py before (cdc8ad9)</a> → <a href="{VLLM}/blob/00c25c81d83861185c8832a1747463e148b6e8d9/'
            f'vllm/model_executor/models/diffusion_gemma.py">after (00c25c8)</a>, PR '
            f'<a href="{VLLM}/pull/45828">#45828</a>'),
    caveat=("reconstructed from the file before and after the PR (the after-version also holds the TP fix #46177); "
            "the PR's own diff view was not examined"),
    toy=(("explainer.model.registry.PreFixDiffusionGemmaForConditionalGeneration", ""),
         ("explainer.model.registry.DiffusionGemmaForConditionalGeneration", "class "),
         ("explainer.model.interfaces.supports_pp", "")),
    notes=("the pre-fix toy class lists SupportsPP and sets make_empty_intermediate_tensors: the two removed lines",
           "the post-fix toy class lists neither; its forward still takes intermediate_tensors",
           "supports_pp needs both halves, so the startup check (EngineConfig.verify_with_parallel_config) "
           "rejects PP > 1 before any rank exists"))

FIX_40150 = Fix(
    pr=40150, title="The CPU tensor-dict fast path asks the communicator what it really chose",
    diff="""\
 # vllm/distributed/parallel_state.py, GroupCoordinator.__init__
-self.use_cpu_custom_send_recv = current_platform.is_cpu() and hasattr(
-    torch.ops._C, "init_shm_manager")
+self.use_cpu_custom_send_recv = (
+    current_platform.is_cpu()
+    and self.device_communicator
+    and getattr(self.device_communicator, "supports_tensor_dict", False))
 # vllm/distributed/device_communicators/cpu_communicator.py, CpuCommunicator.__init__
+self.supports_tensor_dict = isinstance(self.dist_module, _CPUSHMDistributed)
""",
    source=(f'<a href="{VLLM}/blob/02bdead9022e0ebd7159a4af93f74138fcf7bf10/vllm/distributed/device_communicators/'
            f'cpu_communicator.py">cpu_communicator.py (02bdead)</a>, '
            f'<a href="{VLLM}/blob/main/vllm/distributed/parallel_state.py">parallel_state.py</a>, PR '
            f'<a href="{VLLM}/pull/40150">#40150</a> (issue <a href="{VLLM}/issues/37933">#37933</a>)'),
    caveat=("the expressions are vLLM's before and after the PR; the after-form of the gate is vLLM "
            f"{vllm_release.RUNS}'s "
            "(lines 574-578 of its parallel_state.py); the PR's own diff was not examined (line wrapping here is "
            "ours)"),
    toy=(("explainer.distributed.parallel_state.GroupCoordinator._gate", ""),
         ("explainer.distributed.device_communicators.cpu_communicator.CpuCommunicator.__init__", "supports_tensor_dict"),
         ("explainer.distributed.device_communicators.cpu_communicator.CpuCommunicator.send_tensor_dict", "")),
    notes=("_gate computes both forms; the notebook selects one by name (gate='pre-40150' or 'post-40150')",
           "the line #40150 added: True only when the shared-memory shim was really chosen",
           "the post-fix guard: a direct call on the torch.distributed backend raises NotImplementedError"))


def _resolve(dotted: str):
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


def toy_source(dotted: str, around: str = "", context: int = 1) -> tuple[str, str]:
    """(where: ``explainer/…py:L1–L2``, source lines) of a toy object, read with ``inspect``. With ``around``,
    only the lines containing it (± ``context``); ``around="class "`` keeps a class's header and docstring."""
    obj = _resolve(dotted)
    lines, start = inspect.getsourcelines(obj)
    keep = list(range(len(lines)))
    if around == "class ":
        end = next((i for i, line in enumerate(lines[1:], 1) if line.strip().endswith('"""') and i > 1), 1)
        keep = list(range(end + 1))
    elif around:
        hits = [i for i, line in enumerate(lines) if around in line]
        keep = sorted({j for i in hits for j in range(max(0, i - context), min(len(lines), i + context + 1))})
    text, prev = [], None
    for i in keep:
        if prev is not None and i != prev + 1:
            text.append("    ...\n")
        text.append(lines[i])
        prev = i
    path = Path(inspect.getsourcefile(obj)).resolve()
    rel = path.as_posix().split("/explainer/", 1)[-1]
    where = f"explainer/{rel}:{start + keep[0]}–{start + keep[-1]}"
    return where, "".join(text).rstrip("\n")


CSS = """<style>
.xp-ann{font:13px/1.4 system-ui,sans-serif;color:#222;max-width:980px}
.xp-ann .xp-cols{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}
.xp-ann .xp-col{flex:1 1 400px;min-width:0}
.xp-ann pre{font:11.5px/1.35 ui-monospace,monospace;background:#f7f7f7;border:1px solid #ddd;padding:6px;
 margin:3px 0;white-space:pre-wrap;overflow-wrap:anywhere}
.xp-ann .xp-del{background:#fbe3d2;display:block;border-left:4px solid #d55e00}
.xp-ann .xp-add{background:#dbeaf7;display:block;border-left:4px double #0072b2}
.xp-ann .xp-mark{font-weight:800;display:inline-block;width:1.4em;text-align:center}
.xp-ann .xp-del .xp-mark{color:#a33f00}.xp-ann .xp-add .xp-mark{color:#005a8c}
.xp-ann .xp-src{font-size:12px;color:#555}
</style>"""


def _diff_html(diff: str) -> str:
    out = []
    for line in diff.splitlines():
        mark, body = line[:1], line[1:]
        if mark == "-":
            out.append(f'<span class="xp-del" data-change="removed"><span class="xp-mark">−</span>{escape(body)}</span>')
        elif mark == "+":
            out.append(f'<span class="xp-add" data-change="added"><span class="xp-mark">+</span>{escape(body)}</span>')
        else:
            out.append(f"  {escape(body)}\n")
    return "<pre>" + "".join(out) + "</pre>"


def annotated_html(fix: Fix) -> str:
    """vLLM's before/after lines (− removed, + added) beside the toy's counterpart, each with its source."""
    toy = []
    for (dotted, around), note in zip(fix.toy, fix.notes):
        where, src = toy_source(dotted, around)
        toy.append(f'<div class="xp-src"><code>{escape(where)}</code> — {escape(note)}</div><pre>{escape(src)}</pre>')
    return (f'{CSS}<div class="xp-ann" id="xp-ann-{fix.pr}"><b>#{fix.pr}: {escape(fix.title)}</b>'
            f'<div class="xp-cols"><div class="xp-col"><b>vLLM</b> (− removed, + added)'
            f'{_diff_html(fix.diff)}<div class="xp-src">{fix.source}; {escape(fix.caveat)}</div></div>'
            f'<div class="xp-col"><b>the toy</b> (read from the running package with <code>inspect</code>)'
            f'{"".join(toy)}</div></div></div>')
