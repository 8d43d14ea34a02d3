"""``Row``: one conformance check, the toy's value beside the real vLLM's, and whether they agree."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Row:
    name: str
    toy: dict
    vllm: dict
    agree: bool | None                  # None: not run here (the reason is in ``vllm``)
    how: str = ""                       # what ran for real on each side, and what was composed
    keys: list[str] = field(default_factory=list)   # the fields compared (the others are shown, not compared)
    build: dict | None = None           # the kernel library vLLM loaded, when the answer depends on it

    def to_json(self) -> dict:
        return {"name": self.name, "toy": self.toy, "vllm": self.vllm, "agree": self.agree, "compared": self.keys,
                "how": self.how, "depends_on_build": self.build is not None, "build": self.build}


def compare(name: str, toy: dict, vllm: dict, keys: list[str], how: str) -> Row:
    """A row that agrees when every field of ``keys`` is equal on both sides (and present on the vLLM side)."""
    agree = all(k in vllm and toy.get(k) == vllm.get(k) for k in keys)
    return Row(name, toy, vllm, agree, how, list(keys))


def failed(name: str, toy: dict, why: str, how: str) -> Row:
    """A row whose vLLM side could not run: it does not agree, and says why."""
    return Row(name, toy, {"error": why}, False, how, [])


def skipped(name: str, why: str) -> Row:
    """A row this machine cannot run (e.g. no namespaces without root): neither agrees nor disagrees."""
    return Row(name, {}, {"skipped": why}, None, "", [])
