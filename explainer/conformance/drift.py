"""The drift detector: every vLLM text the package quotes, looked up in the installed vLLM's own source files.

A quote is (what, vLLM file, the package's text, where the package holds it). The text is taken from the package
itself wherever it holds one (the toy's message constants, the after-side of the two PR diffs the notebooks show),
so a change on either side shows. Matching ignores layout only: adjacent string literals are joined, runs of
whitespace are one space, no space after ``(`` or before ``)``, no trailing comma before ``)``. A quote found
gives the file and line (what ``SOURCES.md`` pins); one not found gives the file, the closest passage and the
difference, so the next vLLM release says what to update. Reads files only: runs in this venv, not in vLLM's.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from explainer import vllm_env, vllm_release
from explainer.config import PP_NOT_SUPPORTED_MESSAGE
from explainer.conformance.places import normalize
from explainer.conformance.rows import Row
from explainer.distributed.device_communicators.cpu_communicator import FALLBACK_LOG, NO_DICT_FASTPATH
from explainer.render.annotated import FIX_40150, FIX_45828

WINDOW = 14                                  # lines a quote may span in vLLM's file


@dataclass(frozen=True)
class Quote:
    what: str
    file: str                                # relative to the vllm package folder
    text: str
    held_in: str                             # where the package holds the text


def diff_pieces(fix) -> list[tuple[str, str]]:
    """(vLLM file, text) for each passage of a ``Fix`` diff's after-side: context and added lines, split at ``...``."""
    out, file, piece = [], None, []

    def flush():
        if file and any(p.strip() for p in piece):
            out.append((file, "\n".join(piece)))
        piece.clear()
    for line in fix.diff.splitlines():
        mark, body = line[:1], line[1:]
        if body.lstrip().startswith("# vllm/"):
            flush()
            file = body.strip()[2:].split(",")[0].removeprefix("vllm/")
        elif body.strip() == "...":
            flush()
        elif mark in (" ", "+"):
            piece.append(body)
    flush()
    return out


def quotes() -> list[Quote]:
    out = [Quote("the PP startup rejection's message", "config/model.py", PP_NOT_SUPPORTED_MESSAGE,
                 "explainer.config.PP_NOT_SUPPORTED_MESSAGE"),
           Quote("the communicator's fallback log line", "distributed/device_communicators/cpu_communicator.py",
                 FALLBACK_LOG, "explainer.distributed.device_communicators.cpu_communicator.FALLBACK_LOG"),
           Quote("the tensor-dict methods' guard", "distributed/device_communicators/cpu_communicator.py",
                 NO_DICT_FASTPATH, "explainer.distributed.device_communicators.cpu_communicator.NO_DICT_FASTPATH"),
           Quote("PPHandler.broadcast's int64 assert", "v1/worker/gpu/pp_utils.py",
                 "assert sampled_token_ids.dtype == torch.int64", "explainer.worker.pp_utils (the toy's assert)"),
           Quote("DiffusionSampler's int32 sampled buffer", "model_executor/models/diffusion_gemma.py",
                 "self._sampled = torch.zeros(max_num_reqs, self.canvas_length, dtype=torch.int32",
                 "explainer.worker.diffusion_sampler (the toy's buffer)"),
           Quote("the SHM group name", "distributed/device_communicators/cpu_communicator.py",
                 'return f"{instance_identifier}-{shm_group_identifier}-cpushm"',
                 "explainer.distributed.device_communicators.cpu_communicator.CpuCommunicator.make_group_name"),
           Quote("the CPU worker's ident from its init method", "v1/worker/cpu_worker.py",
                 'else init_method.split(":")[-1]', "explainer.distributed.hosts_node (each node's port)"),
           Quote(f"{vllm_release.RUNS}'s CPU architecture allow-list", "distributed/device_communicators/cpu_communicator.py",
                 " or ".join(f"current_platform.get_cpu_architecture() == CpuArchEnum.{a}" for a in ALLOW_LIST_032),
                 "explainer.conformance.drift.ALLOW_LIST_032 (the toy keeps 02bdead's list)"),
           Quote("Model Runner V1's refusal of diffusion models", "config/vllm.py",
                 'f"Model Runner V1 does not support: {', "the conformance row of the pre-#45828 model")]
    for fix in (FIX_45828, FIX_40150):
        for i, (file, text) in enumerate(diff_pieces(fix), 1):
            out.append(Quote(f"#{fix.pr}'s after-side, passage {i}", file, text,
                             f"explainer.render.annotated.FIX_{fix.pr}.diff"))
    return out


ALLOW_LIST_032 = ("X86", "ARM", "POWERPC", "S390X")


def vllm_root() -> Path | None:
    found = sorted(vllm_env.venv_dir().glob("lib/python*/site-packages/vllm"))
    return found[0] if found else None


def locate(quote: Quote, lines: list[str]) -> int | None:
    """The 1-based line where ``quote`` starts in ``lines`` (layout ignored), or None."""
    want = normalize(quote.text)
    for i in range(len(lines)):
        at = normalize("\n".join(lines[i:i + WINDOW])).find(want)
        if normalize(lines[i]) and 0 <= at <= len(normalize(lines[i])):   # starts on line i (not a blank one)
            return i + 1
    return None


def closest(quote: Quote, lines: list[str]) -> tuple[int, str]:
    """The start line and text of the passage most like ``quote`` (for the difference)."""
    want = normalize(quote.text)
    n = max(quote.text.count("\n") + 1, len(want) // 50 + 1)     # vLLM wraps its lines near 80 characters
    best = max(range(max(1, len(lines) - n + 1)), key=lambda i: difflib.SequenceMatcher(
        None, want, normalize("\n".join(lines[i:i + n])), autojunk=False).ratio())
    return best + 1, normalize("\n".join(lines[best:best + n]))


def check(quote: Quote, root: Path) -> Row:
    toy = {"quote": normalize(quote.text), "file": f"vllm/{quote.file}", "held_in": quote.held_in}
    path = root / quote.file
    if not path.exists():
        return Row(f"source: {quote.what}", toy, {"file": f"vllm/{quote.file}", "missing": "no such file"}, False)
    lines = path.read_text().splitlines()
    line = locate(quote, lines)
    if line is not None:
        return Row(f"source: {quote.what}", toy, {"found_at": f"vllm/{quote.file}:{line}"}, True,
                   "read from the installed vLLM's file", [])
    at, text = closest(quote, lines)
    delta = list(difflib.ndiff([toy["quote"]], [text]))
    return Row(f"source: {quote.what}", toy, {"file": f"vllm/{quote.file}", "closest_at": f"vllm/{quote.file}:{at}",
                                              "closest": text, "difference": delta}, False,
               "read from the installed vLLM's file: the quote is not there", [])


def rows() -> list[Row]:
    root = vllm_root()
    if root is None:
        return [Row("source: the installed vLLM", {}, {"error": vllm_env.missing_reason() or "no vllm package"}, False)]
    return [check(q, root) for q in quotes()]
