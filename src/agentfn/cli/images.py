"""The platform's images on this machine: `agentfn images` builds every function's image and the operator's from the
repository's Dockerfiles with podman, and `agentfn up --images` runs each part from its image under the chart's
runtime settings (`Container`).

podman is the engine (Debian's runs as root without a daemon). The Dockerfiles build FROM a base image, by default
the public `python:3.11-slim-bookworm`; where no registry can be reached, `stand_in_base` makes one from Debian's
packages with the same layout (Python 3.11 as `python`, `groupadd`, `useradd`) and says so: only the base differs.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from rich.console import Console

from agentfn.memory.settings import EmbeddingSettings

ROOT = Path(__file__).resolve().parents[3]  # the source tree: src/agentfn/cli/ is three below it
PUBLIC_BASE = "python:3.11-slim-bookworm"
STAND_IN = "localhost/agentfn-base:bookworm"
# The functions, each from functions/Dockerfile with its package's name as FUNCTION, and the operator from its own.
FUNCTIONS = ("memory", "page", "model", "platform_status", "list_models", "radar_latest", "run_code", "workbench")
IMAGES = (*FUNCTIONS, "operator")
UID = 10001  # the images' user, and the chart's runAsUser


def image(part: str) -> str:
    """The local reference of a part's image (the chart's image name: run_code -> run-code)."""
    return f"localhost/agentfn/{part.replace('_', '-')}:local"


def podman() -> list[str]:
    """podman and the flags this host needs: a host whose cgroups are not unified (v1 or hybrid) runs containers with
    runc and cgroupfs (crun refuses a hybrid host)."""
    if shutil.which("podman") is None:
        raise SystemExit("podman is not installed: apt-get install podman runc (Debian), or your distribution's podman")
    unified = Path("/sys/fs/cgroup/cgroup.controllers").exists()
    return ["podman"] if unified else ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]


def ulimits() -> list[str]:
    """Limits for every container and build step within this process's own: podman's defaults can exceed a host's
    hard limits, and then nothing starts. Processes are held to 4096 (more is refused on some hosts)."""
    flags = []
    for name, limit, most in (("nofile", resource.RLIMIT_NOFILE, 65536), ("nproc", resource.RLIMIT_NPROC, 4096)):
        soft, hard = (most if value == resource.RLIM_INFINITY else min(value, most) for value in resource.getrlimit(limit))
        flags += ["--ulimit", f"{name}={soft}:{hard}"]
    return flags


def exists(reference: str) -> bool:
    return subprocess.run([*podman(), "image", "exists", reference], capture_output=True).returncode == 0


def last_line(text: str) -> str:
    """What a failed command said last, past podman's own closing words ("Error: building at STEP ...")."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith(("Error: building at STEP", ": exit status", "--> "))]
    errors = [line for line in said if "error" in line.lower()]
    return (errors or said or ["(no output)"])[-1][:300]


# --- the base ---


def base_image(wanted: str, console: Console) -> str:
    """The base to build on: `wanted` if it is here or can be pulled; for the public default, a stand-in made from
    Debian's packages otherwise. Anything else missing is one line saying what and how to get it."""
    if exists(wanted):
        return wanted
    with console.status(f"pulling the base image {wanted}"):
        pulled = subprocess.run([*podman(), "pull", "-q", wanted], capture_output=True, text=True, timeout=900)
    if pulled.returncode == 0:
        return wanted
    if wanted != PUBLIC_BASE:
        raise SystemExit(f"no base image: {wanted} is not here and cannot be pulled ({last_line(pulled.stderr)})")
    if not exists(STAND_IN):
        stand_in_base(STAND_IN, console)
    console.print(
        f"[yellow]![/] {PUBLIC_BASE} cannot be pulled here; building on {STAND_IN}, a stand-in made from Debian's "
        "packages with the same layout (only the base differs)"
    )
    return STAND_IN


def stand_in_base(reference: str, console: Console) -> None:
    """Debian bookworm (minbase) with Python 3.11 as `python`, venv, `useradd` and CA certificates, imported as
    `reference`. It trusts what this machine trusts (its CA bundle, which pip and uv read), so a build reaches the package
    index the way this machine does."""
    if shutil.which("mmdebstrap") is None:
        raise SystemExit(
            f"no base image: {PUBLIC_BASE} cannot be pulled here, and mmdebstrap, which makes a stand-in from Debian's "
            "packages, is not installed: apt-get install mmdebstrap"
        )
    bundle = "/etc/ssl/certs/ca-certificates.crt"
    with tempfile.TemporaryDirectory(prefix="agentfn-base-") as work, console.status("making a stand-in base image"):
        tar = Path(work) / "base.tar"
        made = subprocess.run(
            [
                "mmdebstrap",
                "--variant=minbase",
                "--include=python3,python3-venv,python-is-python3,passwd,ca-certificates",
                *([f"--customize-hook=copy-in {bundle} /etc/ssl/certs"] if Path(bundle).is_file() else []),
                "bookworm",
                str(tar),
            ],
            capture_output=True,
            text=True,
        )
        if made.returncode != 0:
            raise SystemExit(
                f"no base image: {PUBLIC_BASE} cannot be pulled here, and Debian's packages for a stand-in cannot be "
                f"fetched either (mmdebstrap: {last_line(made.stderr)})"
            )
        changes = ["ENV=LANG=C.UTF-8", f"ENV=PIP_CERT={bundle}", 'CMD=["python3"]']
        subprocess.run(
            [*podman(), "import", *(f"--change={c}" for c in changes), str(tar), reference], check=True, capture_output=True
        )
    # Its digest, recorded: each image built on it carries it (org.opencontainers.image.base.digest), and the builds
    # name the base by it.
    console.print(f"[green]✓[/] the stand-in base {reference} (Debian bookworm, Python 3.11): {digest_of(reference)}")


# --- the builds ---


@dataclass
class Built:
    part: str
    seconds: float
    size: int  # bytes, the whole image
    added: int  # bytes of the layers over the base


def build(
    base: str | None, embedding_model: str, logs: Path, console: Console, parts=IMAGES, cache: bool = True
) -> list[Built]:
    """The images of `parts`, one after the other (they share the Dockerfiles' first stages, made once); the first
    that fails stops the build with its last words and its log. The base is passed by its digest, so every image of
    one build, and every build until the base is made again, starts from the same bytes; each image records it
    (the OCI labels org.opencontainers.image.base.name and .digest). `cache=False` builds every layer anew (the
    installers' caches still serve the locked files, whose hashes are checked)."""
    base = base_image(base or PUBLIC_BASE, console)
    base_size = size(base)
    pinned = by_digest(base)
    labels = {"org.opencontainers.image.base.name": base, "org.opencontainers.image.base.digest": pinned.split("@")[1]}
    console.print(f"[green]✓[/] the base {base} is {pinned}")
    logs.mkdir(parents=True, exist_ok=True)
    built = []
    for part in parts:
        dockerfile = "operator/Dockerfile" if part == "operator" else "functions/Dockerfile"
        args = {"BASE": pinned} | ({} if part == "operator" else {"FUNCTION": part, "EMBEDDING_MODEL": embedding_model})
        log = logs / f"{part}.log"
        started = time.monotonic()
        with console.status(f"building {image(part)}"), open(log, "wb") as out:
            done = subprocess.run(
                [
                    *podman(),
                    "build",
                    "--network",
                    "host",
                    *ulimits(),
                    *([] if cache else ["--no-cache"]),
                    "-f",
                    dockerfile,
                    *(f"--build-arg={key}={value}" for key, value in args.items()),
                    *(f"--label={key}={value}" for key, value in labels.items()),
                    "-t",
                    image(part),
                    ".",
                ],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        if done.returncode != 0:
            raise SystemExit(f"{image(part)} did not build: {last_line(log.read_text(errors='replace'))} (whole log: {log})")
        whole = size(image(part))
        built.append(Built(part, time.monotonic() - started, whole, whole - base_size))
        console.print(
            f"[green]✓[/] {image(part)} in {built[-1].seconds:.0f} s ({mib(whole)}, {mib(whole - base_size)} over the base)"
        )
    return built


def digest_of(reference: str) -> str:
    """The digest of a local image's manifest (sha256:...), the name a registry would serve those bytes by."""
    answer = subprocess.run(
        [*podman(), "image", "inspect", "--format", "{{.Digest}}", reference], capture_output=True, text=True, check=True
    )
    return answer.stdout.strip()


def by_digest(reference: str) -> str:
    """A local image's reference by digest: repository@sha256:..."""
    repository = reference.split("@")[0]
    if ":" in repository.rsplit("/", 1)[-1]:
        repository = repository.rsplit(":", 1)[0]  # its tag
    return f"{repository}@{digest_of(reference)}"


def size(reference: str) -> int:
    answer = subprocess.run(
        [*podman(), "image", "inspect", "--format", "{{.Size}}", reference], capture_output=True, text=True, check=True
    )
    return int(answer.stdout.strip())


def mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB"


def default_embedding_model() -> str:
    """The local platform's embedder (it ships in a package, so the memory image builds with no hub)."""
    return EmbeddingSettings.model


# --- running a part from its image ---


def limits(part: str) -> dict[str, str]:
    """The chart's resource limits of a part (charts/agentfn/values.yaml), as podman flags' values."""
    values = yaml.safe_load((ROOT / "charts" / "agentfn" / "values.yaml").read_text())
    section = values["functions"].get(part) or values.get(part)  # the workbench and the operator have their own
    found = section["resources"]["limits"]
    return {"memory": memory_flag(str(found["memory"])), "cpus": cpus_flag(str(found["cpu"]))}


def memory_flag(quantity: str) -> str:
    """A Kubernetes memory quantity (Mi, Gi) as podman's --memory (m, g)."""
    for suffix, unit in (("Gi", "g"), ("Mi", "m"), ("Ki", "k")):
        if quantity.endswith(suffix):
            return quantity.removesuffix(suffix) + unit
    return quantity  # bytes


def cpus_flag(quantity: str) -> str:
    """A Kubernetes CPU quantity ("500m", "2") as podman's --cpus."""
    return str(int(quantity.removesuffix("m")) / 1000) if quantity.endswith("m") else quantity


# The /proc paths podman masks or makes read-only by default, unmasked for run_code's container only: the kernel mounts
# a new /proc (bubblewrap's) only where the container's own is fully visible, so each of them that a kernel has is
# needed (tests/images leaves each one masked in turn). Named, not `/proc/*`: a mask added elsewhere stays, and
# bubblewrap then says so; /sys stays masked.
PROC_UNMASKED = (
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/proc/asound",
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
)


@dataclass
class Container:
    """One part run from its image as the chart runs its pod: uid 10001, a read-only root with /tmp the only
    writable place (a tmpfs, as the chart's emptyDir), every capability dropped, no privilege escalation, the
    chart's memory and CPU limits, on the host's network (the same loopback ports as the processes)."""

    part: str  # the image's part: a function, or `operator`
    name: str  # the container's name
    env_file: Path  # its settings, in a file only root reads: nothing of them on podman's command line
    readable: tuple[Path, ...] = ()  # host folders and files it reads, mounted read-only at the same path
    writable: tuple[Path, ...] = ()  # host folders it writes (the operator's registry: the ConfigMap it writes)
    argv: tuple[str, ...] = ()  # instead of the image's command

    def run_argv(self) -> list[str]:
        limit = limits(self.part)
        mounts = [f"--volume={path}:{path}:ro" for path in self.readable]
        mounts += [f"--volume={path}:{path}:rw" for path in self.writable]
        return [
            *podman(),
            "run",
            "--rm",
            "--replace",
            f"--name={self.name}",
            f"--hostname={self.name}",  # as a pod has its own (run_code's programs see it)
            "--network=host",
            f"--user={UID}:{UID}",
            "--read-only",
            "--read-only-tmpfs=false",  # only /tmp, below; podman would add /run and /var/tmp
            "--tmpfs=/tmp:rw,size=256m,mode=1777",  # the chart's emptyDir sizeLimit
            "--cap-drop=all",
            "--security-opt=no-new-privileges",
            # run_code's bubblewrap mounts a /proc of its own for the program's pid namespace, which the kernel refuses
            # while any path of the container's /proc is covered; the local mode's alone: gVisor, the chart's
            # RuntimeClass for it, is that wall in a cluster (docs/deploying.md).
            *([f"--security-opt=unmask={':'.join(PROC_UNMASKED)}"] if self.part == "run_code" else []),
            f"--memory={limit['memory']}",
            f"--cpus={limit['cpus']}",
            *ulimits(),
            *mounts,
            f"--env-file={self.env_file}",
            image(self.part),
            *self.argv,
        ]


def env_file(path: Path, env: dict[str, str]) -> Path:
    """A container's settings written as podman's env file, readable by root alone."""
    if any("\n" in value for value in env.values()):
        raise RuntimeError(f"{path.name}: a setting with a line break cannot go in an env file")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.writelines(f"{name}={value}\n" for name, value in sorted(env.items()))
    return path


def check_built() -> None:
    """Every image is here, or one line says which are not and how to make them."""
    missing = [image(part) for part in IMAGES if not exists(image(part))]
    if missing:
        raise SystemExit(f"not built: {', '.join(missing)}; build them with ./dev images")


def pid(name: str) -> int | None:
    """The host pid of a running container's first process."""
    answer = subprocess.run([*podman(), "inspect", "--format", "{{.State.Pid}}", name], capture_output=True, text=True)
    return int(answer.stdout) if answer.returncode == 0 and answer.stdout.strip() not in ("", "0") else None


def remove(names: list[str]) -> None:
    """Containers by name, gone whether they run or not (their processes stop first, as a pod's would)."""
    if names:
        subprocess.run([*podman(), "rm", "--force", "--ignore", "--time=10", *names], capture_output=True)
