"""The images, read rather than built (no container engine here): every Dockerfile is multi-stage, ends as
a fixed non-root user with nothing to build with, copies only what exists, and serves the right app; and
skaffold.yaml builds each function's image from the one functions/Dockerfile, its folder the build argument,
and hands the built references to the chart."""

from __future__ import annotations

import importlib
import json
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from support.chart import FUNCTIONS, ROOT, env_of, knative_services, objects, values_schema

FUNCTION_DOCKERFILE = ROOT / "functions" / "Dockerfile"
DOCKERFILES = {fn: FUNCTION_DOCKERFILE for fn in FUNCTIONS} | {"operator": ROOT / "operator" / "Dockerfile"}
BUILD_TOOLS = re.compile(r"\b(gcc|g\+\+|make|build-essential|cargo|rustc|clang|pip3? install|apt-get install)\b")


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    return [(m.group(1).upper(), m.group(2).strip()) for m in re.finditer(r"^\s*([A-Za-z]+)\s+(.*)$", joined, re.M)]


def stages(text: str) -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for instruction in instructions(text):
        if instruction[0] == "FROM":
            found.append([])
        if found:  # an ARG before the first FROM belongs to no stage
            found[-1].append(instruction)
    return found


def problems(text: str) -> list[str]:
    """What is wrong with a Dockerfile, by the project's rules (empty: nothing)."""
    found = []
    every = stages(text)
    if len(every) < 2:
        return ["not multi-stage"]
    final = every[-1]
    users = [args for name, args in final if name == "USER"]
    if not users or users[-1].split(":")[0] in ("root", "0"):
        found.append("the final stage runs as root")
    for name, args in final:
        if name == "RUN" and BUILD_TOOLS.search(args):
            found.append(f"build tools in the final stage: {args}")
    names = {args.split()[-1] for stage in every for name, args in stage[:1] if " AS " in args.upper()}
    for stage in every:
        for name, args in stage:
            if name != "COPY":
                continue
            words = shlex.split(args)
            source_from = [w for w in words if w.startswith("--from=")]
            paths = [w for w in words if not w.startswith("--")]
            if source_from:
                if source_from[0].split("=", 1)[1] not in names:
                    found.append(f"COPY from an unknown stage: {args}")
                continue
            for source in paths[:-1]:
                if not (ROOT / source).exists():
                    found.append(f"COPY of a missing path: {source}")
    cmds = [args for name, args in final if name == "CMD"]
    if not cmds:
        found.append("no CMD")
    else:
        try:
            json.loads(cmds[-1])
        except ValueError:
            found.append("CMD is not in exec form")
    return found


def command(text: str) -> list[str]:
    return json.loads([args for name, args in stages(text)[-1] if name == "CMD"][-1])


@pytest.mark.parametrize("name", list(DOCKERFILES))
def test_dockerfile_follows_the_rules(name):
    assert DOCKERFILES[name].exists()
    assert problems(DOCKERFILES[name].read_text()) == []


def final_env(text: str) -> dict[str, str]:
    """The final stage's ENV, `$NAME` left as written."""
    env = {}
    for name, args in stages(text)[-1]:
        if name == "ENV":
            env |= dict(word.split("=", 1) for word in shlex.split(args))
    return env


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_the_image_serves_its_function_with_gunicorn(fn, monkeypatch):
    text = FUNCTION_DOCKERFILE.read_text()
    assert command(text) == ["gunicorn", "-c", "python:agentfn.shared.gunicorn_conf"]
    # The build argument becomes AGENTFN_FUNCTION, from which gunicorn's settings name the app.
    assert final_env(text)["AGENTFN_FUNCTION"] == "$FUNCTION"
    for stage in stages(text):  # an ARG is seen only in the stages that declare it
        if any("FUNCTION" in args for name, args in stage if name in ("RUN", "ENV")):
            assert ("ARG", "FUNCTION") in stage, stage[0]
    monkeypatch.setenv("AGENTFN_FUNCTION", fn)
    conf = runpy.run_module("agentfn.shared.gunicorn_conf")  # gunicorn reads its -c module's globals
    module, _, factory = conf["wsgi_app"].partition(":")
    assert module == f"agentfn.{fn}.app" and factory == "create_app()"
    assert callable(importlib.import_module(module).create_app)


def test_without_a_function_gunicorn_serves_the_app_it_is_given(monkeypatch):
    monkeypatch.delenv("AGENTFN_FUNCTION", raising=False)
    assert "wsgi_app" not in runpy.run_module("agentfn.shared.gunicorn_conf")


def test_each_image_installs_only_its_functions_lock_with_the_hashes_checked():
    named = {name: args for name, args in ((s[0][1].split()[-1], s) for s in stages(FUNCTION_DOCKERFILE.read_text()))}
    # The function's stage: a venv of exactly its group's lock (the project's dependencies and its own group), every
    # hash checked, then the project's wheel without resolving anything more.
    runs = [" ".join(args.split()) for name, args in named["build"] if name == "RUN"]
    assert any(
        'uv pip sync --python /opt/venv/bin/python --require-hashes --compile-bytecode "locks/${FUNCTION}.txt"' in a
        for a in runs
    ), runs
    assert runs[-1].endswith(
        "uv pip install --python /opt/venv/bin/python --no-deps --compile-bytecode /wheels/agentfn-*.whl"
    )
    # The installer and the build backend from their own lock, with pip checking the hashes; nothing else is installed.
    tools = [" ".join(args.split()) for name, args in named["tools"] if name == "RUN"]
    assert len(tools) == 1
    assert tools[0].endswith("&& /opt/tools/bin/pip install --require-hashes --no-deps -r locks/tools.txt"), tools
    assert all((ROOT / "locks" / f"{fn}.txt").is_file() for fn in FUNCTIONS)
    operator = [args for name, args in stages(DOCKERFILES["operator"].read_text())[2] if name == "RUN"]
    assert any("--require-hashes --compile-bytecode locks/operator.txt" in args for args in operator), operator


def test_the_operator_image_runs_kopf_on_the_operator():
    assert command(DOCKERFILES["operator"].read_text())[:4] == ["kopf", "run", "-m", "agentfn.operator"]
    [deployment] = objects("default", "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["command"][:4] == [
        "kopf",
        "run",
        "-m",
        "agentfn.operator",
    ]


def test_memory_bakes_in_the_model_the_chart_points_at():
    text = FUNCTION_DOCKERFILE.read_text()
    run = [args for stage in stages(text) for name, args in stage if name == "RUN" and "embedder download" in args]
    assert len(run) == 1 and '"$FUNCTION" = memory' in run[0]  # only memory's image fetches it
    # EMBEDDING_MODEL chooses the model; by default the one the chart's values name, in the folder they name.
    [default] = [args for stage in stages(text) for name, args in stage if name == "ARG" and "EMBEDDING_MODEL=" in args]
    model = default.split("=", 1)[1]
    target = re.search(r'download "\$EMBEDDING_MODEL" --dir "([^"]+)"', run[0])
    env = env_of(knative_services()["memory"])
    assert (model, target.group(1).replace("$EMBEDDING_MODEL", model)) == (
        env["AGENTFN_EMBEDDING_MODEL"],
        env["AGENTFN_EMBEDDING_MODEL_DIR"],
    )
    assert "COPY --from=model /models /models" in text


@pytest.mark.parametrize(
    ("values_set", "embedding_model", "dimensions", "threshold", "recall"),
    [
        ("default", "qwen3-embedding-0.6b", 1024, 0.40, "vector"),
        ("offline-embedder", "multilingual-e5-small-q4", 384, 0.82, "hybrid"),
    ],
)
def test_memory_runs_either_embedder_and_its_figures_follow_the_name(
    values_set, embedding_model, dimensions, threshold, recall
):
    """The settings memory reads from the chart's environment give the model's own dimensions, floor and recall."""
    from agentfn.memory.embedder import config_from_env

    env = {k: str(v) for k, v in env_of(knative_services(values_set)["memory"]).items() if isinstance(v, str | int)}
    config = config_from_env(env)
    assert (config.name, config.dimensions, config.threshold, config.recall) == (
        embedding_model,
        dimensions,
        threshold,
        recall,
    )


def test_the_user_is_the_one_the_chart_runs_as():
    for name, path in DOCKERFILES.items():
        user = [args for n, args in stages(path.read_text())[-1] if n == "USER"][-1]
        assert user == "10001:10001", name
    for service in knative_services().values():
        assert service["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsUser"] == 10001


BROKEN = [
    ("single stage", 'FROM python:3.11-slim\nUSER 10001\nCMD ["gunicorn"]\n', "not multi-stage"),
    ("root at the end", 'FROM python:3.11-slim AS build\nFROM python:3.11-slim\nUSER root\nCMD ["x"]\n', "runs as root"),
    ("no user at all", 'FROM python:3.11-slim AS build\nFROM python:3.11-slim\nCMD ["x"]\n', "runs as root"),
    (
        "a compiler in the final stage",
        'FROM a AS build\nFROM b\nRUN apt-get update && apt-get install -y gcc\nUSER 1\nCMD ["x"]\n',
        "build tools",
    ),
    ("a missing source", 'FROM a AS build\nCOPY nowhere/ /src\nFROM b\nUSER 1\nCMD ["x"]\n', "missing path: nowhere/"),
    ("an unknown stage", 'FROM a AS build\nFROM b\nCOPY --from=builder /x /x\nUSER 1\nCMD ["x"]\n', "unknown stage"),
    ("a shell-form CMD", "FROM a AS build\nFROM b\nUSER 1\nCMD gunicorn app\n", "exec form"),
]


@pytest.mark.parametrize("text, pattern", [r[1:] for r in BROKEN], ids=[r[0] for r in BROKEN])
def test_the_dockerfile_rules_bite(text, pattern):
    assert any(pattern in p for p in problems(text)), problems(text)


SKAFFOLD = yaml.safe_load((ROOT / "skaffold.yaml").read_text())


def test_skaffold_builds_every_image_from_its_dockerfile():
    artifacts = {a["image"]: a for a in SKAFFOLD["build"]["artifacts"]}
    assert set(artifacts) == {f"agentfn/{name.replace('_', '-')}" for name in DOCKERFILES}
    for name, path in DOCKERFILES.items():
        artifact = artifacts[f"agentfn/{name.replace('_', '-')}"]
        assert artifact["context"] == "." and ROOT / artifact["docker"]["dockerfile"] == path
        args = artifact["docker"].get("buildArgs", {})
        assert args == ({} if name == "operator" else {"FUNCTION": name})


@pytest.mark.parametrize("where", ["default", "local", "production"])
def test_skaffold_hands_each_built_image_to_the_chart(where):
    config = SKAFFOLD if where == "default" else next(p for p in SKAFFOLD["profiles"] if p["name"] == where)
    [release] = config["deploy"]["helm"]["releases"]
    assert release["chartPath"] == "charts/agentfn" and release["namespace"] == "agentfn"
    allowed = set(values_schema()["properties"]["images"]["properties"]["overrides"]["properties"])
    templates = release["setValueTemplates"]
    assert {k.removeprefix("images.overrides.") for k in templates} == allowed == set(DOCKERFILES)
    for key, value in templates.items():
        name = key.removeprefix("images.overrides.")
        # skaffold's variable: the image name with every other character as "_"
        assert (
            value == "{{.IMAGE_FULLY_QUALIFIED_" + re.sub(r"[^A-Za-z0-9]", "_", f"agentfn/{name.replace('_', '-')}") + "}}"
        )
    for values_file in release.get("valuesFiles", []):
        assert (ROOT / values_file).exists()


def test_dockerignore_keeps_what_the_images_copy():
    ignored = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copied = {"pyproject.toml", "README.md", "src", "locks"}
    assert not copied & set(ignored)
    assert Path(".venv").name in ignored
    assert "devstack" in ignored  # the dev issuer and the test doubles never reach a build context


def build_sources(text: str) -> list[str]:
    """What a Dockerfile's first two stages (the tools, then the wheel built on them) copy from the repository: the
    tree its wheel is built from."""
    copies = [shlex.split(args) for stage in stages(text)[:2] for name, args in stage if name == "COPY"]
    return [source for words in copies if not any(w.startswith("--from=") for w in words) for source in words[:-1]]


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> dict[str, bytes]:
    """The files of the project's wheel as the images build it: from only what their build stage copies."""
    [sources] = {tuple(build_sources(path.read_text())) for path in DOCKERFILES.values()}
    tree = tmp_path_factory.mktemp("image-context")
    for source in sources:
        if (ROOT / source).is_dir():
            shutil.copytree(ROOT / source, tree / source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            (tree / source).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / source, tree / source)
    # uv beside the interpreter (./dev installs it); its cache holds the build backend ./dev installed with.
    uv = Path(sys.executable).with_name("uv")
    subprocess.run([uv, "build", "--wheel", "--offline", "--out-dir", tree / "dist", tree], check=True, capture_output=True)
    [wheel] = (tree / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


STAND_INS = ROOT / "devstack/src/agentfn/devstack"


@pytest.mark.parametrize("module", sorted(p.relative_to(STAND_INS).as_posix() for p in STAND_INS.rglob("*.py")))
def test_no_image_ships_a_stand_in(shipped, module):
    """The dev issuer (it mints a token for whoever asks) and the platform services' test doubles are in no
    image: neither under their package nor copied anywhere else in the wheel the images install."""
    assert any(name.startswith("agentfn/shared/") for name in shipped)  # the wheel holds the project
    assert not [name for name in shipped if name.startswith("agentfn/devstack/")]
    assert (STAND_INS / module).read_bytes() not in shipped.values()


DIGEST = "sha256:" + "0123456789abcdef" * 4


def images_of(sets: tuple[str, ...]) -> dict[str, str]:
    """Each part's image as rendered: the Knative Services' by function, the operator's Deployment's, and the model
    image's `helm test` pod's (by the name of the pod)."""
    found = {}
    for d in objects("default", sets=sets):
        spec = d["spec"]["template"]["spec"] if d["kind"] in ("Service", "Deployment") and "template" in d["spec"] else None
        spec = spec or (d["spec"] if d["kind"] == "Pod" else None)
        if spec:
            found[f"{d['kind']}/{d['metadata']['name']}"] = spec["containers"][0]["image"]
    return found


@pytest.mark.parametrize("part", ["page", "operator", "model"])
def test_a_digest_in_the_values_pins_that_image_and_no_other(part):
    plain, pinned = images_of(()), images_of((f"images.digests.{part}={DIGEST}",))
    changed = {name: (plain[name], pinned[name]) for name in plain if plain[name] != pinned[name]}
    assert changed and all(after == f"{before}@{DIGEST}" for before, after in changed.values()), changed
    assert all(f"/{part.replace('_', '-')}:" in before for before, _ in changed.values()), changed


def test_a_digest_follows_an_override():
    override = "registry.example/agentfn/page:built"
    rendered = images_of((f"images.overrides.page={override}", f"images.digests.page={DIGEST}"))
    assert f"{override}@{DIGEST}" in rendered.values()
