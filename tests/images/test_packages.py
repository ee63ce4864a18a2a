"""What the images hold: the packages of their group's lock, exactly, with every requirement met as a current
resolver reads it; the same packages with the same hashes when an image is built again from the same commit; and a
page opened and read through the page function's image, which needs what it imports only on a read (trafilatura,
lxml's HTML cleaner)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.utils import canonicalize_name
from support.page import page_env

from agentfn.cli import images
from agentfn.devstack.harness.ports import free_port
from agentfn.shared.contract import audience

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
UV = shutil.which("uv", path=str(BIN))

# Each installed distribution of the image's venv: its name, its version, and the hashes its RECORD lists (every file
# the wheel installed), as one sha256. Left out: uv_cache.json, uv's note of when it read a local wheel (the project's),
# which is its cache's bookkeeping, not the package.
MANIFEST = """
import hashlib, importlib.metadata, json
found = {}
for dist in importlib.metadata.distributions():
    lines = (dist.read_text("RECORD") or "").splitlines()
    record = sorted(line for line in lines if ",sha256=" in line and "/uv_cache.json," not in line)
    found[dist.metadata["Name"]] = [dist.version, hashlib.sha256("\\n".join(record).encode()).hexdigest()]
print(json.dumps(found, sort_keys=True))
"""


def manifest(reference: str) -> dict[str, list[str]]:
    ran = subprocess.run(
        [*images.podman(), "run", "--rm", *images.ulimits(), "--network=none", reference, "python", "-c", MANIFEST],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    return {canonicalize_name(name): value for name, value in json.loads(ran.stdout).items()}


def pins(lock: Path) -> dict[str, str]:
    """The lock's pins that apply to the images' platform (Linux, x86-64, CPython 3.11): name -> version."""
    environment = {
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "python_version": "3.11",
        "python_full_version": "3.11.2",
        "os_name": "posix",
    }
    found = {}
    for line in lock.read_text().splitlines():
        line = line.removesuffix("\\").strip()
        if not line or line.startswith(("#", "--")):
            continue
        requirement, _, marker = line.partition(";")
        if marker.strip() and not Marker(marker.strip()).evaluate(environment):
            continue
        name, _, version = requirement.strip().partition("==")
        found[canonicalize_name(name)] = version
    return found


@pytest.mark.parametrize("part", images.IMAGES)
def test_each_image_holds_exactly_its_lock(part):
    held = manifest(images.image(part))
    held.pop("agentfn")
    assert {name: version for name, (version, _) in held.items()} == pins(ROOT / "locks" / f"{part}.txt")


@pytest.mark.parametrize("part", images.IMAGES)
def test_each_image_records_its_base_by_digest(part):
    """The build named the base by its digest, and the image says which: the base here has those bytes still."""
    answer = subprocess.run(
        [*images.podman(), "image", "inspect", "--format", "{{json .Config.Labels}}", images.image(part)],
        capture_output=True,
        text=True,
        check=True,
    )
    labels = json.loads(answer.stdout) or {}
    base, digest = labels.get("org.opencontainers.image.base.name"), labels.get("org.opencontainers.image.base.digest")
    assert base and digest, labels
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest) and images.digest_of(base) == digest


# Every distribution the venv holds, pinned to what it holds, given to uv as requirements with the network off and no
# cache: uv finds them met by the venv, or it would have to fetch something, and fails.
AUDIT = """
set -e
/opt/venv/bin/python -c 'import importlib.metadata as m
for d in m.distributions():
    if d.metadata["Name"] != "agentfn":
        print(d.metadata["Name"] + "==" + d.version)' > /tmp/held.txt
/usr/local/bin/uv-check pip install --dry-run --offline --no-cache --python /opt/venv/bin/python -r /tmp/held.txt
"""


@pytest.mark.parametrize("part", images.IMAGES)
def test_every_requirement_in_each_image_is_met_as_a_current_resolver_reads_it(part):
    """uv reads extras' names as the packages spell them (justext's lxml[html_clean] is lxml's html-clean extra), which
    the base's pip did not: its `pip check` found nothing missing while lxml_html_clean was (and so does `uv pip check`,
    which does not look at extras)."""
    ran = subprocess.run(
        [
            *images.podman(),
            "run",
            "--rm",
            *images.ulimits(),
            "--network=none",
            f"--volume={UV}:/usr/local/bin/uv-check:ro",
            images.image(part),
            "sh",
            "-c",
            AUDIT,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Would make no changes" in ran.stderr, ran.stderr


def test_a_second_build_of_the_same_commit_holds_the_same_packages_with_the_same_hashes(tmp_path):
    """The page image built again with no cached layer: the same distributions, versions and installed files."""
    first = manifest(images.image("page"))
    built = subprocess.run(
        [str(BIN / "agentfn"), "images", "page", "--no-cache", "--logs", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "COLUMNS": "400"},
    )
    assert built.returncode == 0, built.stdout + built.stderr
    again = manifest(images.image("page"))
    assert again == first
    assert {"trafilatura", "lxml", "lxml-html-clean"} <= set(again)


# --- a page read through the page function's image, in the page tests' lab ---


@pytest.fixture(scope="module")
def page_container(lab, issuer, postgres, tmp_path_factory):
    """The page image as the chart runs it, started by podman inside the lab's namespace (host networking there is the
    namespace's), listening on the namespace's loopback."""
    port = free_port()
    env = page_env(lab, issuer, postgres.provision("page", "agentfn_page"), PORT=str(port), AGENTFN_BIND="127.0.0.1")
    env = {k: v for k, v in env.items() if k != "AGENTFN_PAGE_DEADLINE_SECONDS"}  # the image's first read is cold
    # The files it reads (the lab's CA, the callers' pseudonym key), readable by the image's user as a pod's mounts are.
    folder = tmp_path_factory.mktemp("page-image")
    folder.chmod(0o755)
    for name, value in env.items():
        if value.startswith("/") and Path(value).is_file():
            copy = folder / f"{name}-{Path(value).name}"
            shutil.copy(value, copy)
            os.chown(copy, images.UID, images.UID)
            env[name] = str(copy)
    readable = tuple(Path(v) for v in env.values() if v.startswith(str(folder)))
    settings = images.env_file(folder / "page.env", env)
    container = images.Container("page", f"agentfn-page-lab-{port}", settings, readable=readable)
    log = folder / "page.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            ["nsenter", f"--net={lab.netns}", "--", *container.run_argv()], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            probe = lab.inside(
                f"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{port}/readyz').status)"
            )
            if probe.stdout.strip() == "200":
                break
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"the page container was not ready:\n{log.read_text()[-3000:]}"
            time.sleep(0.5)
        yield port
    finally:
        images.remove([container.name])
        process.wait(30)


OPEN = """
import json, requests
session = requests.Session()
session.trust_env = False
answer = session.post("http://127.0.0.1:{port}/v1/open", json={{"url": {url!r}}},
                      headers={{"Authorization": "Bearer {token}"}}, timeout=60)
print(json.dumps({{"status": answer.status_code, "body": answer.json()}}))
"""


def test_a_public_page_is_fetched_and_read_through_the_page_image(lab, issuer, page_container):
    token = issuer.exchanged(audience("page"), "page-image-reader")
    ran = lab.inside(OPEN.format(port=page_container, url="http://www.pub.test/article", token=token), timeout=90)
    assert ran.returncode == 0, ran.stderr
    answer = json.loads(ran.stdout)
    assert answer["status"] == 200, answer
    page = answer["body"]
    assert page["title"] == "A public article"
    assert "The first paragraph explains the subject" in page["text"] and "Home" not in page["text"]
    assert [h["path"] for h in lab.public_hits()] == ["/article"]
