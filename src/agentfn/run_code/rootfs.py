"""The minimal root a sandbox gets: the interpreter, its standard library and the shared libraries they load.

Found once per process by asking the interpreter where its files are and `ldd` what its binary and its
extension modules link; every path is bound read-only at the same place inside. Nothing else of the host
is there: no /etc, no /home, no project tree, no virtualenv, no site-packages.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass

from .limits import SandboxError

PROBE = """
import json, sys, sysconfig
paths = sysconfig.get_paths()
print(json.dumps({"executable": sys.executable, "version": "%d.%d" % sys.version_info[:2],
                  "stdlib": paths["stdlib"], "platstdlib": paths["platstdlib"],
                  "site": sorted({paths["purelib"], paths["platlib"]})}))
"""
LDD_LINE = re.compile(r"^\s*(?:\S+\s+=>\s+)?(/\S+)\s+\(0x[0-9a-f]+\)$")


@dataclass(frozen=True)
class Root:
    python: str  # the interpreter's real path, the same inside
    version: str
    binds: tuple[tuple[str, str], ...]  # (host path, sandbox path), read-only
    hidden: tuple[str, ...]  # directories inside a bind that stay empty (site-packages)


def discover(python: str) -> Root:
    """What `python` needs to run, and nothing more."""
    real = os.path.realpath(python)
    if not os.access(real, os.X_OK):
        raise RuntimeError(f"the sandbox interpreter {python} is not an executable")
    probe = subprocess.run([real, "-I", "-S", "-c", PROBE], env={}, capture_output=True, timeout=30, check=True)
    info = json.loads(probe.stdout)
    stdlib = sorted({info["stdlib"], info["platstdlib"]})
    binaries = [real] + sorted(glob.glob(os.path.join(info["platstdlib"], "lib-dynload", "*.so")))
    binds = {real: real}
    for lib in linked_libraries(binaries):
        binds[lib] = os.path.realpath(lib)
    binds.update({d: d for d in stdlib})
    hidden = tuple(s for s in info["site"] if any(s.startswith(d + "/") for d in stdlib) and os.path.isdir(s))
    return Root(
        python=real, version=info["version"], binds=tuple((src, dst) for dst, src in sorted(binds.items())), hidden=hidden
    )


def linked_libraries(binaries: list[str]) -> set[str]:
    """Every shared library (and the loader) the binaries link, as paths the loader will look for."""
    # At the lowest priority: it runs beside a cold start, which should not wait for it. ldd runs the loader
    # once per binary (about fifty); split over the cores, since the first call may be waiting for the root.
    nice = ["nice", "-n", "19"] if shutil.which("nice") else []
    parts = min(len(binaries), os.cpu_count() or 1, 4)
    runs = [
        subprocess.Popen(
            [*nice, "ldd", *binaries[i::parts]],
            env={"LC_ALL": "C", "PATH": os.defpath},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for i in range(parts)
    ]
    found = set()
    try:
        for run in runs:
            for line in run.communicate(timeout=60)[0].splitlines():
                match = LDD_LINE.match(line)
                if match:
                    found.add(match.group(1))
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
                run.wait()
    if not found:
        raise RuntimeError("ldd found no libraries for the sandbox interpreter")
    return found


class LazyRoot:
    """The root, discovered once per process on first use (~0.3 s: one ldd run), not on the way to ready."""

    def __init__(self, python: str):
        self.python = python
        self._root: Root | None = None
        self._lock = threading.Lock()

    def get(self) -> Root:
        with self._lock:
            if self._root is None:
                try:
                    self._root = discover(self.python)
                except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as e:
                    raise SandboxError(f"the sandbox root cannot be made: {type(e).__name__}") from None
            return self._root


def default_python() -> str:
    """The system interpreter: its prefix holds only the standard library (a virtualenv's would not)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(candidate):
            return candidate
    raise RuntimeError("no python3 found; set AGENTFN_RUN_CODE_PYTHON")
