"""A room on one machine: N learners on the hub, side by side with one laptop's checks in the same run.

``python -m explainer bench --only hub --learners N`` (as root, after ``make hub``) starts a hub as the instructor
does (``hub serve``, folders and accounts of its own, removed at the end), then, as a room arriving at once:

1. signs N learners in through the hub's REST API (``POST /hub/api/users``) and starts their servers, all at once
   (``POST /hub/api/users/NAME/server``): the time from the request until the hub says the server is ready;
2. in each learner's server, a kernel (over its websocket, as JupyterLab drives it) runs the three exercises as a
   notebook does, all learners at once: ``check(ID, wrong)`` then ``check(ID, right)`` (the stub, then a passing
   answer): the seconds each ``check()`` takes inside the kernel (its grader starting at the first one);
3. the same six checks on one laptop's set-up in the same run: a grader process here, alone, jailed
   (``workshop.grader_process``), its first check cold as in a fresh kernel;
4. memory per learner with the kernel and its grader still running: the proportional set size of their processes,
   and the peak of their control group where there is one (page cache is charged to the group that first read a
   file, so a learner who loaded torch first carries more of it);
5. the board (``/services/board/api/board``, as the admin): exactly N seats, each exercise passed, two attempts
   each.

Goals (DESIGN): a ready server p95 under 30 s; check latency p95 within 2x the laptop's; memory stated.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from explainer.bench import Row
from explainer.hub import accounts
from explainer.hub.learner_session import Kernel, Session
from explainer.hub.limits import Limits, group_for
from explainer.hub.process import HubProcess
from explainer.hub.state import DEFAULT_PREFIX
from explainer.workshop import learner
from explainer.workshop import catalog
from explainer.workshop.catalog import EXERCISES
from explainer.workshop.grader_process import GraderProcess

READY_GOAL, LATENCY_GOAL = 30.0, 2.0
CHECK = ("t0 = time.perf_counter()\nr = check({ex!r}, {fn})\n"
         "print(json.dumps([time.perf_counter() - t0, r.passed, r.reason]))")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def cases() -> list:
    """(exercise, the stub the exercises notebook starts from, a passing answer) for each exercise."""
    return [(ex, m.EXAMPLES["stub"].source, m.EXAMPLES["solution"].source) for ex, m in catalog.load_all().items()]


def laptop_checks() -> tuple[list[float], bool]:
    """The same six checks in one grader process here (one learner's laptop), first one cold."""
    grader = GraderProcess()
    grader.start()
    times, ok = [], True
    try:
        for ex, wrong, right in cases():
            for source, want in ((wrong, False), (right, True)):
                path = Path(grader_dir()) / f"{ex.replace('-', '_')}_{want}.py"
                path.write_text(source)
                code = learner.from_file(path, EXERCISES[ex].function, ex)
                t0 = time.perf_counter()
                report = grader.check(ex, code)
                times.append(time.perf_counter() - t0)
                ok = ok and report.passed == want
    finally:
        grader.close()
        shutil.rmtree(grader_dir(), ignore_errors=True)
    return times, ok


def grader_dir() -> str:
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"explainer-bench-hub-{os.getpid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def learner_memory(limits: Limits, account: str) -> tuple[int, int | None]:
    """Bytes: the proportional set size of the learner's processes now (a library every learner maps counts 1/N
    for each), and the most their memory group held since their server started, where there is one."""
    total = 0
    for pid in accounts.processes_of({pwd.getpwnam(account).pw_uid}):
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
            total += int(next(ln.split()[1] for ln in rollup.splitlines() if ln.startswith("Pss:"))) << 10
        except (OSError, StopIteration, ValueError):
            pass
    return total, limits.usage(account, peak=True)


def start_server(hub: HubProcess, name: str) -> float:
    t0 = time.monotonic()
    status, answer = hub.api(f"users/{name}/server", "POST")
    if status not in (201, 202):
        raise RuntimeError(f"the hub did not start {name}'s server: {status} {answer}")
    while time.monotonic() - t0 < 300:
        status, user = hub.api(f"users/{name}")
        server = (user or {}).get("servers", {}).get("", {}) if status == 200 else {}
        if server.get("ready"):
            return time.monotonic() - t0
        time.sleep(0.25)
    raise TimeoutError(f"{name}'s server was not ready within 300 s")


def run_learner(hub: HubProcess, name: str) -> tuple[Kernel, list]:
    """The learner's kernel (still running) and [exercise, seconds, verdict as expected] of the six checks, cell by
    cell as a notebook runs them."""
    status, answer = hub.api(f"users/{name}/tokens", "POST", {"note": "bench", "expires_in": 3600})
    if status != 201:
        raise RuntimeError(f"no token for {name}: {status} {answer}")
    kernel = Kernel(Session.with_token(hub.url, name, answer["token"]))
    out = []
    cell(kernel, name, "import json, time\nfrom explainer.workshop import check, start\nstart()")
    for ex, wrong, right in cases():
        for source, want in ((wrong, False), (right, True)):
            cell(kernel, name, source)
            seconds, passed, reason = json.loads(cell(kernel, name, CHECK.format(ex=ex, fn=EXERCISES[ex].function)))
            if passed != want:
                print(f"bench: {name}: check({ex!r}) of {'a passing answer' if want else 'the stub'} "
                      f"{'failed' if want else 'passed'}: {reason}", file=sys.stderr, flush=True)
            out.append([ex, seconds, passed == want])
    return kernel, out


def cell(kernel: Kernel, name: str, source: str) -> str:
    out = kernel.run(source, timeout=600)
    if out["error"]:
        raise RuntimeError(f"{name}'s kernel: {out['error']}")
    return out["stdout"].strip().splitlines()[-1] if out["stdout"].strip() else ""


def run(quick: bool = False, learners: int = 5) -> list[Row]:
    prefix = os.environ.get("EXPLAINER_HUB_PREFIX", DEFAULT_PREFIX)
    if os.geteuid() != 0 or not Path(prefix, "venv", "bin", "jupyterhub").exists():
        print(f"bench: hub: not run (needs root and `make hub` in {prefix})", file=sys.stderr)
        return []
    load0 = os.getloadavg()[0]
    hub = HubProcess(prefix, f"xb{os.getpid() % 100000}-",
                     extra=["--max-learners", str(learners + 1), "--memory", "3", "--processes", "512"])
    names = [f"learner{i:02d}" for i in range(learners)]
    try:
        hub.start()
        status, answer = hub.api("users", "POST", {"usernames": names})
        if status != 201:
            raise RuntimeError(f"the hub did not make the learners: {status} {answer}")
        with ThreadPoolExecutor(learners) as pool:
            ready = list(pool.map(lambda n: start_server(hub, n), names))
        print(f"bench: hub: {learners} servers ready; running the checks ...", file=sys.stderr, flush=True)
        with ThreadPoolExecutor(learners) as pool:
            ran = list(pool.map(lambda n: run_learner(hub, n), names))
        results = [rows for _, rows in ran]
        limits = Limits(3 << 30, 512, group_for(hub.account_prefix))      # the kernels and graders still running
        memory = [learner_memory(limits, acct) for acct in hub.accounts() if not acct.endswith("000")]
        for kernel, _ in ran:
            kernel.close()
        status, board = hub.api("/services/board/api/board")
        laptop, laptop_ok = laptop_checks()
    except BaseException:
        log = hub.state / "hub.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        said = [ln for ln in lines if any(w in ln for w in ("died", "Killed", "restart", "rror", "MemoryError"))]
        print("bench: hub: the hub's log said:\n  " + "\n  ".join((said or lines)[-25:]), file=sys.stderr)
        raise
    finally:
        hub.close()
    return table(learners, names, ready, results, memory, status, board, laptop, laptop_ok, load0)


def table(learners: int, names: list[str], ready: list[float], results: list, memory: list, status: int, board,
         laptop: list[float], laptop_ok: bool, load0: float) -> list[Row]:
    """The bench's rows from what ``run`` measured."""
    load1 = os.getloadavg()[0]
    hub_times = [t for rows in results for _, t, _ in rows]
    hub_ok = all(ok for rows in results for _, _, ok in rows)
    seats = board["seats"] if status == 200 else []
    exact = (len(seats) == learners and {r["seat"] for r in seats} == set(names) and all(
        r["cells"].get(ex, {}).get("passed") is True and r["cells"][ex]["attempts"] == 2
        for r in seats for ex in EXERCISES))
    where = f"N={learners}, load {load0:.1f}->{load1:.1f}"
    p95_hub, p95_laptop = percentile(hub_times, 0.95), percentile(laptop, 0.95)
    gib = [pss / (1 << 30) for pss, _ in memory]
    group = [used / (1 << 30) for _, used in memory if used is not None]
    return [
        Row("hub", f"time to a ready server, p50 ({where})", statistics.median(ready), None, "s", None, "-", True),
        Row("hub", f"time to a ready server, p95 ({where})", percentile(ready, 0.95), None, "s", None,
            f"< {READY_GOAL:g} s", percentile(ready, 0.95) < READY_GOAL),
        Row("hub", f"check latency in a learner's kernel, p50, vs one laptop ({where})", statistics.median(hub_times),
            statistics.median(laptop), "s", statistics.median(hub_times) / statistics.median(laptop), "-",
            hub_ok and laptop_ok),
        Row("hub", f"check latency in a learner's kernel, p95, vs one laptop ({where})", p95_hub, p95_laptop, "s",
            p95_hub / p95_laptop, f"<= {LATENCY_GOAL:g}x", hub_ok and laptop_ok and p95_hub / p95_laptop <= LATENCY_GOAL),
        Row("hub", f"memory per learner, kernel and grader running: PSS of their processes, mean (max {max(gib):.2f} "
                   f"GiB; {where})", statistics.mean(gib), None, "GiB", None, "stated", True),
        *([Row("hub", f"memory per learner: the peak of their control group, mean (max {max(group):.2f} GiB; {where})",
               statistics.mean(group), None, "GiB", None, "stated", True)] if group else []),
        Row("hub", f"board: exactly {learners} seats, every verdict right ({len(seats)} seats; {where})",
            float(exact), None, "yes", None, "yes", exact),
    ]
