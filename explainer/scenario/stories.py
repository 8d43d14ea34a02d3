"""Every story a notebook tells, named once: its name, its one-line summary, where it runs and the options it
takes. Light (the standard library only): the command line lists and checks them without loading a model. The
function that tells a story (in ``pp.py``, ``comm.py``, ``comm_shared.py``) carries ``@tells(STORY)``, so grep
finds it from the story's constant, and it takes its name from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Story:
    name: str
    summary: str                        # one line (``python -m explainer scenario`` lists them)
    options: tuple[str, ...] = ()       # what the run passes it besides the backend: pp_schedule, gate, engine
    hosts: bool = False                 # runs with one rank per host on ``--backend hosts``
    hosts_only: bool = False            # runs on ``--backend hosts`` only


PP = ("pp_schedule",)                   # every PP story runs on either back-channel schedule
PP1 = Story("pp1", "PP=1 on the post-#45828 model: the reference output", PP)
PP2_PRE_FIX = Story("pp2-pre-fix", "PP=2 on the pre-#45828 model: the int32 sampled ids trip the int64 assert in "
                    "warmup (vLLM's crash, inferred from its code)", PP + ("gate",), hosts=True)
PP2_PRE_FIX_INT64 = Story("pp2-pre-fix-int64", "PP=2 pre-#45828 with the ids cast to int64: rank 0 reads stale "
                          "state, text diverges", PP + ("gate",), hosts=True)
PP2_GATED = Story("pp2-gated", "PP=2 on the post-#45828 model: rejected by the startup check before any rank exists",
                  PP, hosts=True)
PP2_STATE_SYNC = Story("pp2-state-sync", "PP=2 with the sampler-owned state broadcast (open PR #52015): equal to "
                       "PP=1", PP + ("gate",), hosts=True)
COMM_SAME_NODE = Story("comm-same-node", "2 PP ranks on one node: shared-memory backend, custom tensor-dict path, "
                       "dict arrives")
COMM_INTER_NODE_PRE_FIX = Story("comm-inter-node-pre-fix", "2 PP ranks on 2 simulated nodes, pre-#40150 gate: "
                                "AttributeError on both ranks", hosts=True)
COMM_INTER_NODE_FIXED = Story("comm-inter-node-fixed", "2 PP ranks on 2 simulated nodes, post-#40150 gate: "
                              "fallback, generic path delivers", hosts=True)
COMM_SHARED_IDENT_TWO_HOSTS = Story("comm-shared-ident-two-hosts", "2 PP ranks on 2 hosts sharing one ident (one "
                                    "init method): names agree, shared memory chosen, both ranks fail", ("engine",),
                                    hosts=True, hosts_only=True)

SCENARIOS = {s.name: s for s in (PP1, PP2_PRE_FIX, PP2_PRE_FIX_INT64, PP2_GATED, PP2_STATE_SYNC, COMM_SAME_NODE,
                                 COMM_INTER_NODE_PRE_FIX, COMM_INTER_NODE_FIXED, COMM_SHARED_IDENT_TWO_HOSTS)}

TOLD: dict[str, Callable] = {}          # scenario name -> the function that tells it (filled by @tells)


def tells(story: Story) -> Callable[[Callable], Callable]:
    """Mark the decorated function as the one that tells ``story``."""
    def mark(fn: Callable) -> Callable:
        assert story.name not in TOLD, f"{story.name} is told twice"
        TOLD[story.name] = fn
        return fn
    return mark
