"""The two fixes as annotated code: vLLM's removed/added lines beside the toy's source, read live."""

import inspect
import re

from explainer.render import annotated as A
from explainer.distributed.parallel_state import GroupCoordinator
from explainer.model.registry import PreFixDiffusionGemmaForConditionalGeneration


def _changes(html: str, kind: str) -> list[str]:
    # each changed line starts with its own − / + marker (readable without telling the backgrounds apart)
    return re.findall(rf'data-change="{kind}"><span class="xp-mark">[−+]</span>([^<]*)</span>', html)


def test_45828_shows_the_removed_interface_and_buffer_line_beside_the_toy():
    html = A.annotated_html(A.FIX_45828)
    removed = [line.strip() for line in _changes(html, "removed")]
    assert removed[0] == "SupportsPP," and "self.model.make_empty_intermediate_tensors" in removed
    assert _changes(html, "added") == []
    assert "https://github.com/vllm-project/vllm/pull/45828" in html and "cdc8ad9" in html and "00c25c8" in html
    # the toy's lines are the running source, not a copy
    src = inspect.getsource(PreFixDiffusionGemmaForConditionalGeneration)
    assert src.rstrip("\n").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;") \
        .replace("'", "&#x27;") in html
    where, _ = A.toy_source("explainer.model.registry.PreFixDiffusionGemmaForConditionalGeneration")
    assert re.fullmatch(r"explainer/model/registry\.py:\d+–\d+", where)


def test_40150_shows_the_gate_before_and_after_and_the_toys_gate():
    html = A.annotated_html(A.FIX_40150)
    removed, added = " ".join(_changes(html, "removed")), " ".join(_changes(html, "added"))
    assert "hasattr(" in removed and "init_shm_manager" in removed
    assert "supports_tensor_dict" in added and "isinstance(self.dist_module, _CPUSHMDistributed)" in added
    assert "https://github.com/vllm-project/vllm/pull/40150" in html
    _, gate = A.toy_source("explainer.distributed.parallel_state.GroupCoordinator._gate")
    assert gate == inspect.getsource(GroupCoordinator._gate).rstrip("\n")
    where, excerpt = A.toy_source("explainer.distributed.device_communicators.cpu_communicator.CpuCommunicator.__init__",
                                  "supports_tensor_dict")
    assert "isinstance(self.dist_module, _CPUSHMDistributed)" in excerpt and "cpu_communicator.py" in where
