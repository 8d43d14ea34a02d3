"""The release checker: every vLLM pin the product shows, read in another release (``conformance --release``).

For each distinct pin (``0.32.0 v1/worker/gpu/pp_utils.py:259 assert sampled_token_ids.dtype == torch.int64``) the
checker finds its place in the release it names: the one occurrence of its text within its lines, and its context,
the function or class around it (``places.identify``; a text too common to identify a place is refused). In the release checked, the pin is

- ``held``  when its text, in the same context, is still within its lines;
- ``moved`` when its text, in the same context, is elsewhere: ``now`` is the new range, the cited range shifted with
  the text, so re-pinning is copying it;
- ``gone``  when the file is gone, or its context holds the text no more (``why`` says which, and where else the
  text occurs: a place in another context is not the pin's, whatever comes first in the file).

It also answers, from the release's source, the two static facts the package's story rests on (``fixes``): does
DiffusionGemma declare ``SupportsPP`` (vLLM PR #45828), and how is ``supports_tensor_dict`` computed and where does
``GroupCoordinator`` gate on it (vLLM PR #40150). Reads files only (the wheel is never installed).
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from explainer import vllm_env, vllm_release
from explainer.conformance import pins, vllm_source
from explainer.conformance.places import Place, context_at
from explainer.errors import UsageError

STATUSES = ("held", "moved", "gone", "refused")
DIFFUSION = "model_executor/models/diffusion_gemma.py"
COMMUNICATOR = "distributed/device_communicators/cpu_communicator.py"
PARALLEL_STATE = "distributed/parallel_state.py"
MODEL_CONFIG = "config/model.py"


@dataclass
class Result:
    pin: str                        # as the product writes it: "0.32.0 file:lines text"
    release: str                    # the release the pin names
    status: str
    now: str | None                 # "<release checked> <file>:<lines>" (held, moved), None (gone, refused)
    context: str = ""               # the function or class around the text, in the pin's release
    why: str = ""
    uses: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"pin": self.pin, "release": self.release, "status": self.status, "now": self.now,
                "context": self.context, "why": self.why, "uses": self.uses}


def pin_text(pin: pins.Pin) -> str:
    return f"{pin.cited()} {pin.text}"


def follow(pin: pins.Pin, place: Place, home_rel: str, target: vllm_source.Source) -> tuple[str, str | None, str]:
    """(status, now, why) of a pin whose place in its own release is ``place``, in the release ``target``."""
    candidates = target.find(home_rel)
    if len(candidates) != 1:
        return "gone", None, f"{home_rel}: no such file in vLLM {target.release}"
    rel = candidates[0]
    found = target.file(rel).places(pin.text or "")
    same = [p for p in found if p.context == place.context]
    where = f"in {place.context}" if place.context else "at module level"
    if len(same) == 1:
        q = same[0]
        if pin.first <= q.first and q.last <= pin.last:
            return "held", f"{target.release} {rel}:{lines(pin.first, pin.last)}", ""
        first, last = q.first - (place.first - pin.first), q.last + (pin.last - place.last)
        return "moved", f"{target.release} {rel}:{lines(max(1, first), last)}", ""
    if same:
        return "gone", None, f"{len(same)} times {where} in vLLM {target.release}: the text identifies no place there"
    known = {s.name for s in target.file(rel).scopes or []}
    why = f"not {where} any more" + ("" if not place.context or place.context in known else
                                     f" ({place.context} is gone)")
    if found:
        why += "; the text is elsewhere: " + ", ".join(
            f"{p.lines()} ({p.context or 'module level'})" for p in found[:4])
    return "gone", None, why


def lines(first: int, last: int) -> str:
    return f"{first}" + (f"-{last}" if last != first else "")


def check_pins(target: vllm_source.Source, homes: dict[str, vllm_source.Source], root: Path) -> list[Result]:
    """Every distinct vLLM pin of the product in the release ``target``; ``homes``: the pins' own releases."""
    found, _ = pins.scan(root)
    uses: dict[tuple, list[pins.Pin]] = {}
    for pin in found:
        if pin.file.startswith(pins.OWN) or not pin.text:
            continue
        uses.setdefault(pin.key(), []).append(pin)
    out = []
    for group in uses.values():
        pin = group[0]
        result = Result(pin_text(pin), pin.release or "", "refused", None, uses=[p.where for p in group])
        out.append(result)
        if pin.release not in homes:
            result.why = (f"names no release the package is read against ({', '.join(vllm_release.RELEASES)})"
                          if pin.release not in vllm_release.RELEASES else f"vLLM {pin.release} not read here")
            continue
        home_rel, place, why = pins.home(pin, homes[pin.release])
        if place is None:
            result.why = why or ""
            continue
        result.context = place.context
        result.status, result.now, result.why = follow(pin, place, home_rel, target)
    return out


def declared_bases(src: vllm_source.Source, rel: str, name: str) -> tuple[list[str], int] | None:
    text = src.text(rel)
    if text is None:
        return None
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return [ast.unparse(b) for b in node.bases], node.lineno
    return None


def assignment(src: vllm_source.Source, rel: str, target: str) -> dict | None:
    """Where ``self.<target> = ...`` is assigned in a file: its lines, context and the expression (unparsed)."""
    text = src.text(rel)
    if text is None:
        return None
    scopes = src.file(rel).scopes
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(ast.unparse(t) == f"self.{target}" for t in targets) and node.value is not None:
                return {"at": f"{src.release} {rel}:{lines(node.lineno, node.end_lineno or node.lineno)}",
                        "context": context_at(scopes, node.lineno), "expression": ast.unparse(node.value)}
    return None


def fixes(src: vllm_source.Source, runs: vllm_source.Source | None) -> list[dict]:
    """The two static facts of the two fixes, read from ``src`` (``runs``: the release that runs here, to say
    whether the communicator's file is the same)."""
    bases = declared_bases(src, DIFFUSION, "DiffusionGemmaForConditionalGeneration")
    config = src.file(MODEL_CONFIG)
    message = config.places("Pipeline parallelism is not supported for this model") if config else []
    pp = {"fix": "#45828", "question": "does DiffusionGemmaForConditionalGeneration declare SupportsPP?",
          "answer": None if bases is None else "SupportsPP" in bases[0],
          "at": None if bases is None else f"{src.release} {DIFFUSION}:{bases[1]}",
          "bases": None if bases is None else bases[0],
          "rejection": (f"{src.release} {MODEL_CONFIG}:{message[0].lines()} ({message[0].context})" if message
                        else "the PP rejection's message is not in config/model.py")}
    gate = assignment(src, PARALLEL_STATE, "use_cpu_custom_send_recv")
    flag = assignment(src, COMMUNICATOR, "supports_tensor_dict")
    same = None
    if runs is not None and src.text(COMMUNICATOR) is not None:
        same = src.text(COMMUNICATOR) == runs.text(COMMUNICATOR)
    comm = {"fix": "#40150", "question": "how is supports_tensor_dict computed, and where is the parallel_state gate?",
            "answer": None if flag is None else flag["expression"], "at": None if flag is None else flag["at"],
            "gate": gate, f"communicator_same_as_{vllm_release.RUNS}": same}
    return [pp, comm]


def run(release: str, root: Path | None = None, progress=None) -> dict:
    """The whole report for ``release`` (``UsageError`` when it cannot be read: unknown, no network)."""
    root = root or vllm_env.package_root()
    if root is None:
        raise UsageError("conformance --release reads the product's pins: run it from a checkout")
    target = vllm_source.source(release, progress)
    homes = {release: target}
    try:
        found, _ = pins.scan(root)
        named = {p.release for p in found if p.release in vllm_release.RELEASES and not p.file.startswith(pins.OWN)}
        for other in sorted(named - {release}):
            homes[other] = vllm_source.source(other, progress)
        results = check_pins(target, homes, root)
        counts = Counter(r.status for r in results)
        return {"release": release, "source": target.where, "counts": {s: counts.get(s, 0) for s in STATUSES},
                "uses": sum(len(r.uses) for r in results), "pins": [r.to_json() for r in results],
                "fixes": fixes(target, homes.get(vllm_release.RUNS))}
    finally:
        for src in homes.values():
            src.close()


def holds(report: dict) -> bool:
    """Every pin naming the checked release holds in it, none is refused, and both fixes' facts were found."""
    own = [p for p in report["pins"] if p["release"] == report["release"]]
    return (all(p["status"] == "held" for p in own) and not report["counts"]["refused"]
            and all(f["answer"] is not None for f in report["fixes"]))


def print_report(report: dict, out) -> None:
    c = report["counts"]
    print(f"conformance --release {report['release']}: vLLM {report['release']} read from {report['source']}", file=out)
    print(f"pins: {len(report['pins'])} distinct ({report['uses']} uses): {c['held']} held, {c['moved']} moved, "
          f"{c['gone']} gone" + (f", {c['refused']} refused" if c["refused"] else ""), file=out)
    for p in report["pins"]:
        line = f"  {p['status']:<7} {p['pin'][:110]}"
        if p["status"] == "moved":
            line += f"\n          -> now {p['now']}"
        elif p["why"]:
            line += f"\n          ({p['why']})"
        print(line, file=out)
    print("fixes:", file=out)
    for f in report["fixes"]:
        print(f"  {f['fix']}: {f['question']}", file=out)
        if f["fix"] == "#45828":
            print(f"    {'yes' if f['answer'] else 'no'}: {f['at']} bases ({', '.join(f['bases'] or [])}); "
                  f"the rejection: {f['rejection']}", file=out)
        else:
            print(f"    {f['at']} supports_tensor_dict = {f['answer']}", file=out)
            gate = f["gate"] or {}
            print(f"    the gate: {gate.get('at')} ({gate.get('context')}) use_cpu_custom_send_recv = "
                  f"{gate.get('expression')}", file=out)
            same = f.get(f"communicator_same_as_{vllm_release.RUNS}")
            if same is not None and report["release"] != vllm_release.RUNS:
                print(f"    cpu_communicator.py is {'byte-identical to' if same else 'changed since'} "
                      f"{vllm_release.RUNS}'s", file=out)
