"""The room's JupyterHub, for real: one ``hub serve`` on loopback for this file (as root, from ``make hub``'s venv),
three learners who sign in through the login form, run a check in a kernel of their own server and show on the
board under their names; then what a hostile learner or client tries. The last test stops the hub and looks for
anything left behind. Skipped where the hub cannot run (not root, not Linux, no ``make hub``).
"""

from __future__ import annotations

import grp
import http.client
import json
import os
import re
import socket
import time
import urllib.error
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import pytest

from explainer.hub.sign_in_limits import WRONG_EVERY
from explainer.hub.limits import group_for
from explainer.workshop import catalog
from explainer.hub.learner_session import Kernel, Session, SignInRefused
import hubroom

pytestmark = pytest.mark.slow
LEARNERS = {"ana": "wrong", "Björn": "right", "chen": "right"}     # name -> the answer each checks
ACCEPT = catalog.load("accept").EXAMPLES
WRONG, RIGHT = ACCEPT["stub"].source, ACCEPT["solution"].source
CHECK = ("from explainer.workshop import check\nimport explainer.room.client as room_client, time\n"
         "r = check('accept', entropy_bound_accept)\n"
         "for _ in range(40):\n    time.sleep(0.1)\n    if room_client.LAST: break\n"
         "print(json.dumps({'passed': r.passed, 'isolated': r.isolated, 'posted': room_client.LAST}))\n")
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def hub():
    hubroom.hub_or_skip()
    t0 = time.monotonic()
    h = hubroom.Hub()
    try:
        h.start()
        TIMINGS["start"] = time.monotonic() - t0
        yield h
    finally:
        h.close()
        print(f"\nhub suite: {json.dumps({k: round(v, 1) for k, v in TIMINGS.items()})}")


@pytest.fixture(scope="module")
def learners(hub):
    """Three learners signed in through the form, each with a running server and a kernel."""
    def one(name):
        s = Session(hub.url)
        s.sign_in(name, hub.code.lower())                     # typed in lower case: still the code
        spawn = s.start_server()
        k = Kernel(s)
        k.run("import json, os")
        return name, s, k, spawn

    t0 = time.monotonic()
    with ThreadPoolExecutor(3) as pool:
        out = {name: (s, k) for name, s, k, _ in pool.map(one, LEARNERS)}
    TIMINGS["three learners ready"] = time.monotonic() - t0
    yield out
    for _, k in out.values():
        k.close()


def instructor(hub) -> Session:
    s = Session(hub.url)
    s.sign_in("instructor", hub.secret("instructor-code"))
    s.follow.open(hub.url + "services/board/").read()        # the hub's OAuth: the board's cookie
    return s


def board(session: Session) -> dict:
    with session.follow.open(session.base + "services/board/api/board") as resp:
        return json.loads(resp.read())


def test_the_one_line(hub):
    assert re.fullmatch(r"hub: http://127\.0\.0\.1:\d+/   room code: [A-Z2-9]{4}-[A-Z2-9]{4}", hub.line)
    deadline = time.monotonic() + 10
    while "limits per learner" not in hub.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)                                      # the second line, on stderr
    assert re.search(r"limits per learner: (cgroup v[12]: 2 GiB of memory|resource limits)", hub.log.read_text())


def test_three_learners_check_and_show_on_the_board_under_their_names(hub, learners):
    t0 = time.monotonic()

    def one(name):
        s, k = learners[name]
        out = k.run((RIGHT if LEARNERS[name] == "right" else WRONG) + CHECK, timeout=240)
        assert out["error"] is None, out
        return name, json.loads(out["stdout"].strip().splitlines()[-1])

    with ThreadPoolExecutor(3) as pool:
        results = dict(pool.map(one, LEARNERS))
    TIMINGS["three checks"] = time.monotonic() - t0
    for name, verdict in results.items():
        assert verdict["passed"] == (LEARNERS[name] == "right"), (name, verdict)
        assert verdict["isolated"], f"{name}'s check ran without its jail"
        assert verdict["posted"].get("status") == 200, (name, verdict)
    seats = {row["seat"]: row for row in board(instructor(hub))["seats"]}
    assert set(LEARNERS) <= set(seats)
    for name, answer in LEARNERS.items():
        assert seats[name]["cells"]["accept"]["passed"] == (answer == "right")


def test_each_server_runs_as_its_own_account_with_a_private_home(hub, learners):
    homes = {}
    for name, (s, k) in learners.items():
        out = k.run("import getpass, stat\nprint(json.dumps([getpass.getuser(), os.path.expanduser('~'), "
                    "oct(stat.S_IMODE(os.stat(os.path.expanduser('~')).st_mode)), os.getuid(), "
                    "sorted(os.listdir(os.path.expanduser('~/notebooks/workshop')))]))")
        user, home, mode, uid, workshop = json.loads(out["stdout"])
        assert user.startswith(hub.account_prefix) and uid != 0 and mode == "0o700"
        assert workshop == ["exercises.ipynb"]                  # the exercises, not the solutions
        homes[name] = home
    s, k = learners["ana"]
    other = homes["Björn"]
    out = k.run(f"for p in ({other!r}, {other + '/notebooks/01_canvas_sampler.ipynb'!r}, {str(hub.homes)!r}):\n"
                "    try:\n        open(p).read() if p.endswith('.ipynb') else os.listdir(p); print('READ', p)\n"
                "    except PermissionError: print('refused', p)\n")
    assert "READ" not in out["stdout"] and out["stdout"].count("refused") == 3, out


def test_jupyterlab_opens_the_learners_notebooks_trusted(hub, learners):
    """What JupyterLab asks when it opens a notebook (the contents API): it answers, and the stored outputs show
    (trusted: the learner's own signature store, a copy of the one `make hub` signed them in)."""
    for name, (s, _) in learners.items():
        for path in ("notebooks/workshop/exercises.ipynb", "notebooks/01_canvas_sampler.ipynb"):
            model = s.request(f"api/contents/{path}?type=notebook&content=1")
            cells = model["content"]["cells"]
            assert model["type"] == "notebook" and cells, (name, path)
            assert all(c["metadata"].get("trusted", True) is True for c in cells if c["cell_type"] == "code"), (
                name, path, "not trusted")


def status_of(session: Session, path: str) -> int:
    try:
        with session.follow.open(session.base + path) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_instructor_has_the_board_and_learners_do_not(hub, learners):
    s, _ = learners["chen"]
    assert status_of(s, "services/board/") == 403               # the hub refuses the learner the board's sign-in
    assert status_of(s, "services/board/api/board") == 401      # and the board, without it
    summary = board(instructor(hub))["summary"]
    assert summary["exercises"]["accept"]["tried"] >= 3


FORGE = ("import urllib.request, urllib.error\n"
         "def post(headers, seat):\n"
         "    body = json.dumps({'exercise': 'accept', 'passed': True, 'failure': None, 'seat': seat, "
         "'time': time.time(), 'seat_key': None}).encode()\n"
         "    req = urllib.request.Request(os.environ['EXPLAINER_ROOM'] + 'api/report', data=body, method='POST', "
         "headers={'Content-Type': 'application/json', **headers})\n"
         "    try:\n        return urllib.request.urlopen(req, timeout=10).status\n"
         "    except urllib.error.HTTPError as e:\n        return e.code\n"
         "mine = {'Authorization': 'token ' + os.environ['JUPYTERHUB_API_TOKEN']}\n"
         "print(json.dumps([post(mine, 'ana'), post({}, 'ana'), post({'Authorization': 'token made-up'}, 'ana'), "
         "post(mine, 'chen')]))\n")


def test_a_report_forged_for_another_learner_is_refused(hub, learners):
    s, k = learners["chen"]
    out = k.run("import time\n" + FORGE)
    forged_with_my_token, no_token, made_up, mine = json.loads(out["stdout"])
    assert (forged_with_my_token, no_token, made_up) == (403, 401, 403)
    assert mine == 200
    seats = {row["seat"]: row for row in board(instructor(hub))["seats"]}
    assert seats["ana"]["cells"]["accept"]["passed"] is False       # ana's own wrong answer still stands


SNOOP = ("import glob\nout = open(os.path.expanduser('~/snoop.txt'), 'wb')\nn = 0\n"
         "def take(path, limit=1 << 20):\n    global n\n"
         "    try:\n        out.write(open(path, 'rb').read(limit) + b'\\n'); n += 1\n"
         "    except OSError: pass\n"
         "for path in glob.glob('/proc/[0-9]*/environ') + glob.glob('/proc/[0-9]*/cmdline'):\n    take(path)\n"
         "for root in (STATE, HOMES, PREFIX + '/venv/etc', PREFIX + '/venv/share/jupyter', os.path.expanduser('~')):\n"
         "    for dirpath, dirs, files in os.walk(root):\n"
         "        for f in files:\n            if f != 'snoop.txt': take(os.path.join(dirpath, f))\n"
         "for path in glob.glob('/tmp/*') + glob.glob('/tmp/.*') + glob.glob('/dev/shm/*'):\n    take(path)\n"
         "out.write(json.dumps(dict(os.environ)).encode()); out.close()\nprint(n)\n")


def home_of(kernel: Kernel) -> str:
    return kernel.run("import os, json\nprint(os.path.expanduser('~'))")["stdout"].strip()


def proc_env(pid: int) -> dict:
    raw = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


def test_the_hubs_tokens_are_not_found_from_a_learners_kernel(hub, learners):
    from explainer.hub.serve import hub_processes
    from explainer.hub.state import State
    secrets = {"admin token": hub.secret("admin-token"), "instructor code": hub.secret("instructor-code"),
               "cookie secret": hub.secret("jupyterhub_cookie_secret")}
    for pid in hub_processes(State(hub.state)):
        env = proc_env(pid)
        for var in ("CONFIGPROXY_AUTH_TOKEN", "JUPYTERHUB_API_TOKEN"):
            if env.get(var):
                secrets[f"{var} of pid {pid}"] = env[var]
    assert any("CONFIGPROXY" in k for k in secrets) and len(secrets) >= 5, secrets.keys()
    s, k = learners["ana"]
    out = k.run(f"STATE, HOMES, PREFIX = {str(hub.state)!r}, {str(hub.homes)!r}, {str(hubroom.PREFIX)!r}\n" + SNOOP,
                timeout=240)
    assert out["error"] is None, out
    home = home_of(k)
    seen = open(os.path.join(home, "snoop.txt"), encoding="latin-1").read()
    assert len(seen) > 10_000                               # it did read what an account can read
    leaked = [name for name, value in secrets.items() if value and value in seen]
    assert leaked == []


class LoginForm:
    """The login form from ``source`` (another loopback address: another computer, as the hub sees it), on one
    kept-alive connection: the page once (its _xsrf cookie), then as many posts as asked."""

    def __init__(self, port: int, source: str):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
        self.conn.request("GET", "/hub/login")
        resp = self.conn.getresponse()
        page = resp.read().decode()
        self.cookie = "; ".join(v.split(";")[0] for k, v in resp.getheaders() if k.lower() == "set-cookie")
        self.xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page).group(1)

    def post(self, name: str, code: str) -> tuple[int, str]:
        body = urllib.parse.urlencode({"_xsrf": self.xsrf, "username": name, "password": code})
        self.conn.request("POST", "/hub/login", body, {"Content-Type": "application/x-www-form-urlencoded",
                                                       "Cookie": self.cookie})
        resp = self.conn.getresponse()
        return resp.status, resp.read().decode(errors="replace")


def form_post(port: int, source: str, name: str, code: str) -> tuple[int, str]:
    form = LoginForm(port, source)
    try:
        return form.post(name, code)
    finally:
        form.conn.close()


def test_a_wrong_code_a_thousand_times(hub, learners):
    t0 = time.monotonic()
    form = LoginForm(hub.port, "127.0.0.3")
    statuses = [form.post("mallory", "AAAA-AAAA")[0] for _ in range(1000)]
    seconds = TIMINGS["1000 wrong codes"] = time.monotonic() - t0
    assert statuses[:5] == [403] * 5 and set(statuses) == {403, 429}
    assert statuses.count(403) <= 5 + seconds / WRONG_EVERY + 1       # then one more try every WRONG_EVERY s
    status, text = form.post("mallory", hub.code)                          # the right code: still waits
    assert status == 429 and "Too many wrong room codes" in text
    assert form_post(hub.port, "127.0.0.4", "dora", hub.code)[0] == 302   # another computer signs in
    s, k = learners["ana"]
    assert k.run("print(1 + 1)")["stdout"] == "2\n"          # the room goes on


@pytest.mark.parametrize("name, status, why", [
    ("bo\x1bb", 400, "printable"), ("ev\u202eil", 400, "invisible character"), ("\u0441\u0435\u043e", 409, "looks like"),
    ("p\u0430ypal", 400, "one script"), ("ＡＮＡ", 409, "looks like"), ("ANA", 409, "looks like"),
    ("a/b", 400, "'/'"), ("instructor", 403, "instructor's name"),
])
def test_names_with_escapes_or_look_alikes_are_refused(hub, learners, name, status, why):
    form_post(hub.port, "127.0.0.1", "ceo", hub.code)                 # a Latin name that Cyrillic letters imitate
    got, text = form_post(hub.port, "127.0.0.1", name, hub.code)
    assert got == status and why in text.replace("&#39;", "'"), (got, text[-600:])


def test_a_name_is_kept_by_the_first_who_took_it(hub, learners):
    with pytest.raises(SignInRefused) as refused:
        Session(hub.url).sign_in("Björn", hub.code)
    assert refused.value.status == 409 and "taken" in refused.value.message


def test_two_hundred_sign_ins_in_a_minute(hub, learners):
    t0 = time.monotonic()
    form = LoginForm(hub.port, "127.0.0.5")
    one_computer = [form.post(f"bot{i}", hub.code)[0] for i in range(200)]
    TIMINGS["200 sign-ins"] = time.monotonic() - t0
    assert one_computer[:3] == [302] * 3 and set(one_computer[3:]) == {429}
    form = LoginForm(hub.port, "127.0.0.1")
    here = [form.post(f"here{i}", hub.code)[0] for i in range(20)]
    assert set(here[:here.index(409)]) == {302} and set(here[here.index(409):]) == {409}   # the room is full
    assert len(hub.accounts()) <= 14 + 1
    seats = {row["seat"] for row in board(instructor(hub))["seats"]}
    assert set(LEARNERS) <= seats


def test_a_kernel_eating_memory_or_forking_is_stopped_and_the_room_goes_on(hub, learners):
    s, k = learners["ana"]
    home = home_of(k)
    k.run("open(os.path.expanduser('~/mine.txt'), 'w').write('kept')")
    bomb = ("import os, time, signal\nkids = []\n"
            "try:\n    for _ in range(5000):\n        pid = os.fork()\n"
            "        if pid == 0:\n            time.sleep(20)\n            os._exit(0)\n        kids.append(pid)\n"
            "except OSError as e:\n    print('refused', e.errno, len(kids))\n"
            "for pid in kids: os.kill(pid, signal.SIGKILL)\nfor pid in kids: os.waitpid(pid, 0)\n")
    out = k.run(bomb, timeout=120)
    assert out["stdout"].startswith("refused 11 "), out            # EAGAIN: the learner's process limit
    assert int(out["stdout"].split()[2]) < 192
    eat = "chunks = []\nwhile True:\n    chunks.append(bytearray(64 << 20))\n"
    out = k.run(eat, timeout=120)
    assert out["error"] is not None and out["error"][0] in ("MemoryError", "KernelDied"), out
    other = learners["chen"][1]
    assert other.run("print('still here')")["stdout"] == "still here\n"
    assert open(os.path.join(home, "mine.txt")).read() == "kept"


def test_a_restarted_hub_keeps_every_learners_files_and_the_board(hub, learners):
    s, k = learners["ana"]
    home = home_of(k)
    k.run("open(os.path.expanduser('~/mine.txt'), 'w').write('kept')")
    before = board(instructor(hub))
    code = hub.code
    assert hub.stop() == 0
    TIMINGS["restart"] = hub.start()
    assert hub.code == code
    after = board(instructor(hub))
    assert {r["seat"]: r["cells"] for r in after["seats"]} == {r["seat"]: r["cells"] for r in before["seats"]}
    s.start_server()                                          # the browser's cookie still signs it in
    k = Kernel(s)
    try:
        assert home_of(k) == home
        assert k.run("print(open(os.path.expanduser('~/mine.txt')).read())")["stdout"] == "kept\n"
    finally:
        k.close()


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def walk_some(top: str, depth: int):
    for dirpath, dirs, files in os.walk(top):
        if dirpath.count("/") - top.count("/") >= depth:
            dirs[:] = []
        yield dirpath, dirs, files


def test_stopped_and_removed_nothing_is_left_behind(hub, learners):
    from explainer.hub import accounts
    from explainer.hub.serve import hub_processes
    from explainer.hub.state import State
    settings = State(hub.state).settings()
    ports = [settings.port, settings.hub_port, settings.proxy_api_port, settings.board_port]
    assert hub.stop() == 0
    uids = {u.pw_uid for u in accounts.accounts_with(hub.account_prefix)}
    assert hub_processes(State(hub.state)) == [] and accounts.processes_of(uids) == []
    assert [p for p in ports if port_open(p)] == []
    groups = [d for d, _, _ in walk_some("/sys/fs/cgroup", 5) if d.endswith("/" + group_for(hub.account_prefix))]
    assert groups == []
    done = hub.remove()
    assert done.returncode == 0, done.stderr
    assert hub.accounts() == [] and not hub.homes.exists() and not hub.state.exists()
    assert [g.gr_name for g in grp.getgrall() if g.gr_name.startswith(hub.account_prefix)] == []
