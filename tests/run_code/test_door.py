"""run_code through its door: what a program gets back, and a table of escape attempts, each contained."""

import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from support.tools import CANARY, RUN_LIMITS

from agentfn.devstack.harness.servers import BIN, Client, Gunicorn

ROOT = Path(__file__).resolve().parents[2]
UID_BASE = int(RUN_LIMITS["AGENTFN_RUN_CODE_UID_BASE"])
WALL_MS = float(RUN_LIMITS["AGENTFN_RUN_CODE_WALL_SECONDS"]) * 1000
OUTPUT_CAP = int(RUN_LIMITS["AGENTFN_RUN_CODE_OUTPUT_BYTES"])


def run(coder, code: str) -> dict:
    response = coder.post("/v1/call", json={"arguments": {"code": code}})
    assert response.status_code == 200, response.text
    return response.json()["content"]


def test_a_program_runs_and_says_what_happened(coder):
    content = run(coder, "print('hello, sandbox')")
    assert content["stdout"] == "hello, sandbox\n" and content["stderr"] == ""
    assert content["exit_status"] == 0 and content["signal"] is None and content["limit"] is None
    assert content["backend"] == "bubblewrap" and 0 < content["wall_ms"] < WALL_MS
    assert content["truncated"] == {"stdout": False, "stderr": False} and content["runs_left"] == 4


def test_a_failing_program_gives_its_traceback_and_status(coder):
    content = run(coder, "import sys\nprint('before')\nsys.stderr.write('oops\\n')\n1 / 0")
    assert content["exit_status"] == 1 and content["stdout"] == "before\n"
    assert content["stderr"].startswith("oops\n")
    assert content["stderr"].rstrip().endswith("ZeroDivisionError: division by zero")
    assert run(coder, "raise SystemExit(3)")["exit_status"] == 3


def test_a_program_that_is_not_text_is_refused_and_costs_no_run(coder):
    refused = coder.post("/v1/call", json={"arguments": {"code": "print('half a character: \ud800')"}})
    assert refused.status_code == 400 and "surrogate" in refused.json()["detail"]
    assert run(coder, "pass")["runs_left"] == 4


def test_the_standard_library_is_there_and_nothing_else(coder):
    content = run(
        coder,
        "import json, sqlite3, ssl, hashlib, decimal, ctypes, zlib, lzma, bz2, unicodedata\n"
        "print(sqlite3.connect(':memory:').execute('select 40 + 2').fetchone()[0], 'č')\n"
        "try:\n    import requests\nexcept ImportError:\n    print('no third-party packages')",
    )
    assert content["stdout"] == "42 č\nno third-party packages\n", content


def test_each_run_gets_a_fresh_scratch_space(coder):
    first = run(coder, "import os\nopen('/tmp/kept', 'w').write('x')\nprint(os.getcwd(), sorted(os.listdir('.')))")
    assert first["stdout"] == "/tmp ['kept', 'main.py']\n"
    assert run(coder, "import os\nprint(os.path.exists('/tmp/kept'))")["stdout"] == "False\n"


def test_logs_hold_neither_the_program_nor_its_output(run_code, coder):
    marker = f"walrus-{secrets.token_hex(6)}"
    run(coder, f"print('{marker}' * 3)\nraise ValueError('{marker}')")
    assert marker not in run_code.log.read_text()


@dataclass
class Context:
    port: int
    abstract: str
    marker: str
    master_pid: int
    hits: list


@pytest.fixture
def context(service):
    """A loopback TCP server and an abstract unix socket of the test's own, counting whoever reaches them."""
    hits = []
    tcp = socket.create_server(("127.0.0.1", 0))
    abstract = f"agentfn-test-{secrets.token_hex(4)}"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind("\0" + abstract)
    unix.listen()
    stop = threading.Event()

    def accept(server):
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                hits.append(conn)
            except (TimeoutError, OSError):
                continue

    threads = [threading.Thread(target=accept, args=(s,), daemon=True) for s in (tcp, unix)]
    for t in threads:
        t.start()
    yield Context(tcp.getsockname()[1], abstract, f"agentfn-orphan-{secrets.token_hex(6)}", service.process.pid, hits)
    stop.set()
    for t in threads:
        t.join()
    tcp.close()
    unix.close()


def sandbox_processes() -> list[int]:
    """Host processes under the runs' uids, or running a sandboxed program (whose path inside is /tmp/main.py):
    there should be none once a call has returned."""
    return sorted({pid for pid, uid in uids() if UID_BASE <= uid < UID_BASE + 1_000_000} | set(with_marker("/tmp/main.py")))


def with_marker(cmdline_marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if cmdline_marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


# (name, program(context), contained(content, context) -> bool)
ESCAPES = [
    (
        "connect to a loopback server of the test",
        lambda c: (
            f"""
import socket
for target in [("127.0.0.1", {c.port}), ("::1", {c.port}), ("localhost", {c.port})]:
    try:
        socket.create_connection(target, timeout=1)
        print("CONNECTED", target)
    except OSError as e:
        print("no", type(e).__name__)
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("\\0{c.abstract}")
    print("CONNECTED abstract")
except OSError as e:
    print("no", type(e).__name__)
print(socket.if_nameindex())
"""
        ),
        lambda r, c: (
            "CONNECTED" not in r["stdout"] and r["stdout"].count("no ") == 4 and not c.hits and "[(1, 'lo')]" in r["stdout"]
        ),
    ),
    (
        "read the host's /etc/shadow",
        lambda c: (
            """
for path in ("/etc/shadow", "/etc/passwd", "/etc/hostname"):
    try:
        print("READ", path, open(path).read()[:20])
    except OSError as e:
        print("no", type(e).__name__)
"""
        ),
        lambda r, c: "READ" not in r["stdout"] and r["stdout"].count("no FileNotFoundError") == 3,
    ),
    (
        "read the project tree and the service's virtualenv",
        lambda c: (
            f"""
import os
for path in ({str(ROOT / "pyproject.toml")!r}, {str(ROOT / "src/agentfn/shared/identity.py")!r}, {sys.executable!r}):
    try:
        print("READ", path, open(path, "rb").read(10))
    except OSError as e:
        print("no", type(e).__name__)
for path in ({str(ROOT)!r}, "/work", "/root", "/home"):
    print(path, os.path.exists(path))
"""
        ),
        lambda r, c: (
            "READ" not in r["stdout"] and r["stdout"].count("no FileNotFoundError") == 3 and "True" not in r["stdout"]
        ),
    ),
    (
        "read /proc/1/environ, the environment and inherited files",
        lambda c: (
            """
import os
print(open("/proc/1/environ").read().replace("\\0", " "))
print(sorted(os.environ))
print(sorted(os.listdir("/proc/self/fd")))
print(sorted(p for p in os.listdir("/proc") if p.isdigit()))
"""
        ),
        lambda r, c: (
            CANARY not in r["stdout"] + r["stderr"]
            and "AGENTFN" not in r["stdout"]
            and "Bearer" not in r["stdout"]
            and "['HOME', 'LANG', 'PATH', 'PWD']" in r["stdout"]
            and "['0', '1', '2', '3']" in r["stdout"]  # stdin, stdout, stderr, and listdir's own
            and r["stdout"].rstrip().endswith("['1']")
        ),
    ),
    (
        "write outside its tmpfs",
        lambda c: (
            """
import os
for path in ("/x", "/usr/x", "/usr/lib/python3.11/os.py", "/lib/x", "/dev/x", "/proc/x", "/etc/x", "/run/x"):
    try:
        open(path, "a").write("x")
        print("WROTE", path)
    except OSError as e:
        print("no", type(e).__name__)
open("/tmp/mine", "w").write("ok")
print("tmp ok")
"""
        ),
        lambda r, c: "WROTE" not in r["stdout"] and r["stdout"].count("no ") == 8 and "tmp ok" in r["stdout"],
    ),
    (
        "fill its scratch space",
        lambda c: (
            """
n = 0
try:
    while True:
        with open(f"/tmp/f{n}", "wb") as f:
            f.write(b"x" * 900_000)
        n += 1
except OSError as e:
    print("full after", n, type(e).__name__)
"""
        ),
        lambda r, c: "full after" in r["stdout"] and int(r["stdout"].split()[2]) <= 10,
    ),
    (
        "write a file past the size limit",
        lambda c: (
            """
open("/tmp/big", "wb").write(b"x" * (2 << 20))
"""
        ),
        lambda r, c: r["limit"] == "file_size" and "File too large" in r["stderr"],
    ),
    (
        "a new user namespace to regain capabilities",
        lambda c: (
            """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print("unshare", libc.unshare(0x10000000), os.strerror(ctypes.get_errno()))
"""
        ),
        lambda r, c: r["stdout"].startswith("unshare -1"),
    ),
    (
        "fork bomb",
        lambda c: (
            """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"""
        ),
        lambda r, c: r["limit"] in ("processes", "wall_time") and r["wall_ms"] < WALL_MS + 2500,
    ),
    (
        "memory bomb",
        lambda c: (
            """
hoard = []
while True:
    hoard.append(bytearray(10_000_000))
"""
        ),
        lambda r, c: r["limit"] == "memory" and r["stderr"].rstrip().endswith("MemoryError"),
    ),
    (
        "infinite loop",
        lambda c: "while True:\n    pass\n",
        # CPU time ends it, unless the machine is so busy that the wall deadline comes first; never much past 1 s.
        lambda r, c: (
            (r["limit"] == "cpu_time" and r["cpu_ms"] >= 700 or r["limit"] == "wall_time")
            and r["cpu_ms"] <= 1200
            and r["wall_ms"] < WALL_MS + 1000
        ),
    ),
    (
        "output flood",
        lambda c: "while True:\n    print('y' * 1000)\n",
        lambda r, c: r["limit"] == "output" and r["truncated"]["stdout"] and len(r["stdout"].encode()) == OUTPUT_CAP,
    ),
    (
        "sleep past the deadline",
        lambda c: "import time\ntime.sleep(60)\n",
        lambda r, c: (
            r["limit"] == "wall_time" and r["exit_status"] is None and WALL_MS - 100 <= r["wall_ms"] < WALL_MS + 1500
        ),
    ),
    (
        "signals to the parent",
        lambda c: (
            f"""
import os, signal
for pid in (os.getppid(), 1, -1, {c.master_pid}):
    try:
        os.kill(pid, signal.SIGKILL)
        print("sent", pid)
    except OSError as e:
        print("no", pid, type(e).__name__)
print("still here")
"""
        ),
        lambda r, c: (
            f"no {c.master_pid} ProcessLookupError" in r["stdout"] and "still here" in r["stdout"] and alive(c.master_pid)
        ),
    ),
    (
        "a child that outlives its parent",
        lambda c: (
            f"""
import os, subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", {c.marker!r}], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(30)", {c.marker!r}])
    os._exit(0)
print("spawned")
"""
        ),
        lambda r, c: r["stdout"] == "spawned\n" and r["exit_status"] == 0 and not with_marker(c.marker),
    ),
]


@pytest.mark.parametrize(("program", "contained"), [e[1:] for e in ESCAPES], ids=[e[0] for e in ESCAPES])
def test_an_escape_attempt_is_contained(service, issuer, context, program, contained):
    """Each attempt, with the service as root and as the chart's uid 10001."""
    started = time.monotonic()
    content = run(caller(service, issuer, "escaper"), program(context))
    assert time.monotonic() - started < WALL_MS / 1000 + 3
    assert contained(content, context), content
    leftovers = sandbox_processes()
    for _ in range(20):  # a killed sandbox's pid namespace is torn down by the kernel within moments
        if not leftovers:
            break
        time.sleep(0.05)
        leftovers = sandbox_processes()
    assert not leftovers, f"sandbox processes outlived the run: {leftovers}"
    assert requests.get(service.url + "/healthz", timeout=2).status_code == 200


@pytest.mark.slow  # a service process and its sandbox
@pytest.mark.skipif(os.geteuid() != 0, reason="runs get uids of their own only when the service is root")
def test_the_sandbox_dies_with_the_service(tmp_path):
    """A service process killed mid-run takes its sandbox with it (--die-with-parent)."""
    base = 3_700_000
    service = tmp_path / "service.py"
    service.write_text(f"""
from agentfn.run_code.bubblewrap import Bubblewrap
from agentfn.run_code.rootfs import LazyRoot, default_python
from agentfn.run_code.bounds import Bounds
from agentfn.run_code.limits import RunLimits
from agentfn.run_code.sandbox import Uids
from agentfn.run_code.settings import SandboxSettings
limits = RunLimits(wall_seconds=60)
sandbox = Bubblewrap(SandboxSettings(), limits, LazyRoot(default_python()), Uids({base}, 1), Bounds("auto", limits))
sandbox.run("import time\\ntime.sleep(60)")
""")
    process = subprocess.Popen([sys.executable, str(service)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def sandboxed() -> list[int]:
        return [pid for pid, uid in uids() if base <= uid < base + 1000]

    deadline = time.monotonic() + 20
    while not sandboxed() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandboxed(), "the sandbox never started"
    process.kill()
    process.wait()
    deadline = time.monotonic() + 10  # the kernel's signal is at once; on a loaded machine the exit is not
    while sandboxed() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not sandboxed()


def uids() -> list[tuple[int, int]]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            found.append(
                (int(pid), int(re.search(r"^Uid:\s+(\d+)", Path(f"/proc/{pid}/status").read_text(), re.M).group(1)))
            )
        except (OSError, AttributeError):
            continue
    return found


# What bounds a run as a whole: its processes' memory together, and its processes, whatever uid the service has.

SERVICE_UID = 10001  # the chart's runAsUser
MEMORY_MB = int(RUN_LIMITS["AGENTFN_RUN_CODE_MEMORY_MB"])
PROCESSES = int(RUN_LIMITS["AGENTFN_RUN_CODE_PROCESSES"])


class NonRootGunicorn(Gunicorn):
    """The service as the chart runs it: uid and gid 10001, no supplementary groups, no capabilities."""

    def start(self, timeout: float = 60) -> float:
        started = time.monotonic()
        self._out = open(self.log, "ab")
        self.process = subprocess.Popen(
            [
                "setpriv",
                f"--reuid={SERVICE_UID}",
                f"--regid={SERVICE_UID}",
                "--clear-groups",
                "--inh-caps=-all",
                str(BIN / "gunicorn"),
                "-c",
                "python:agentfn.shared.gunicorn_conf",
                "agentfn.run_code.app:create_app()",
            ],
            env=self.env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        self.wait_ready(timeout)
        return time.monotonic() - started


@pytest.fixture(scope="module")
def non_root(run_code_env, tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("starting the service as another uid needs root")
    # Its key of subject_hash where its uid may read it, as a pod reads its mounted Secret.
    directory = Path(tempfile.mkdtemp(prefix="agentfn-run-code-key-"))
    key = directory / "subject-hash-key"
    shutil.copyfile(run_code_env["AGENTFN_SUBJECT_HASH_KEY_FILE"], key)
    for path in (directory, key):
        os.chown(path, SERVICE_UID, SERVICE_UID)
    server = NonRootGunicorn(
        "agentfn.run_code.app:create_app()",
        {**run_code_env, "AGENTFN_SUBJECT_HASH_KEY_FILE": str(key)},
        tmp_path_factory.mktemp("run-code-non-root") / "run_code.log",
    )
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(params=["root", "uid 10001"])
def service(request):
    """run_code as root (runs get host uids of their own) and as the chart's non-root uid (they share it)."""
    if request.param == "root":
        if os.geteuid() != 0:
            pytest.skip("we are not root")
        return request.getfixturevalue("run_code")
    return request.getfixturevalue("non_root")


def caller(service, issuer, who: str) -> Client:
    return Client(service.url, issuer.tool_headers("run_code", f"{who}-{secrets.token_hex(4)}"))


def test_the_service_says_what_bounds_its_runs(service, issuer):
    """A call and the start log name the mechanism in force; the service's uid is the one asked for."""
    content = run(caller(service, issuer, "coder"), "print('hi')")
    assert content["stdout"] == "hi\n" and content["bounds"] in ("cgroup", "rlimit")
    log = service.log.read_text()
    assert f'"event": "run_bounds", "where": "bubblewrap: {content["bounds"]} (' in log
    uid = 0 if service.process.args[0] != "setpriv" else SERVICE_UID
    assert os.stat(f"/proc/{service.process.pid}").st_uid == uid
    assert ("runs as uids of their own" in log) == (uid == 0)


# Six children, each within the per-process limit, together far over the run's memory.
SIX_CHILDREN = f"""
import os, time
for i in range(6):
    if os.fork() == 0:
        hold = b"x" * ({MEMORY_MB // 2} << 20)  # written, so resident
        time.sleep(1.5)
        os._exit(0)
for _ in range(6):
    os.wait()
print("all six held their share")
"""


def test_a_runs_children_together_are_held_to_its_memory(service, issuer):
    content = run(caller(service, issuer, "hoarder"), SIX_CHILDREN)
    assert content["limit"] == "memory", content
    assert "all six" not in content["stdout"] and content["wall_ms"] < WALL_MS + 1500
    assert requests.get(service.url + "/healthz", timeout=2).status_code == 200
    assert run(caller(service, issuer, "after"), "print(6 * 7)")["stdout"] == "42\n"


# Forks until refused and keeps every child: the run sits at its process limit until the deadline.
HOLDING_BOMB = """
import os, time
while True:
    try:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
    except OSError:
        time.sleep(0.005)
"""


def bomb_processes() -> int:
    """Host processes running a sandboxed program (every run's program is /tmp/main.py inside)."""
    return len(with_marker("/tmp/main.py"))


def test_a_fork_bomb_does_not_keep_another_callers_run_from_starting(service, issuer):
    before = bomb_processes()
    with ThreadPoolExecutor(1) as pool:
        bomb = pool.submit(run, caller(service, issuer, "bomber"), HOLDING_BOMB)
        deadline = time.monotonic() + WALL_MS / 1000
        while bomb_processes() < before + PROCESSES - 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert bomb_processes() >= before + PROCESSES - 2, "the bomb never reached its limit"
        other = run(
            caller(service, issuer, "bystander"),
            """
import os
pids = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    pids.append(pid)
print([os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids])
""",
        )
        assert not bomb.done(), "the bomb ended before the other run: the test proved nothing"
        bombed = bomb.result()
    assert other["exit_status"] == 0 and other["stdout"] == "[7, 7, 7]\n", other
    assert bombed["limit"] == "wall_time" and bombed["stderr"] == ""


@pytest.mark.slow  # run_code under gunicorn
@pytest.mark.parametrize(
    ("mode", "refusal"),
    [
        ("required", "AGENTFN_RUN_CODE_CGROUP=required, but "),
        ("sometimes", "AGENTFN_RUN_CODE_CGROUP must be one of auto, required, off"),
    ],
)
def test_a_cgroup_setting_it_cannot_honour_stops_the_start_saying_why(run_code_env, issuer, tmp_path, mode, refusal):
    """`required` runs with a cgroup per run where the machine delegates one, and refuses to start elsewhere."""
    server = Gunicorn(
        "agentfn.run_code.app:create_app()",
        {**run_code_env, "AGENTFN_RUN_CODE_CGROUP": mode, "AGENTFN_WORKERS": "1"},
        tmp_path / "run_code.log",
    )
    try:
        server.start(timeout=30)
    except RuntimeError:
        server.stop()
        assert refusal in server.log.read_text()
        return
    try:
        assert mode == "required", "a setting that is no mode was accepted"
        assert run(caller(server, issuer, "coder"), "print('hi')")["bounds"] == "cgroup"
    finally:
        server.stop()
