"""The README's first command as a newcomer runs it: up, a token, a kept entry recalled, Ctrl-C stops all."""

import hashlib
import hmac
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import jwt
import pytest
import requests

from agentfn.cli.postgres import EmbeddedPostgres
from agentfn.devstack.harness.local_platform import Up
from agentfn.shared.contract import audience
from agentfn.shared.exchange import TokenExchange
from agentfn.shared.identity import Caller

BIN = Path(sys.executable).parent


@pytest.fixture
def up_stack(tmp_path):
    up = Up(tmp_path, random.randrange(20000, 32000, 100))  # below the ephemeral range other tests draw from
    up.start()
    yield up
    up.stop()


def test_up_serves_memory_and_ctrl_c_stops_everything(up_stack):
    base, process, log = up_stack.base, up_stack.process, up_stack.log
    token = up_stack.token("alice")
    memory = f"http://127.0.0.1:{base + 2}"
    headers = {"Authorization": f"Bearer {token}"}
    kept = requests.post(
        memory + "/v1/entries",
        headers=headers,
        timeout=30,
        json={"kind": "preference", "text": "Odgovaraj mi na hrvatskom.", "source": "tour"},
    )
    assert kept.status_code == 201
    recalled = requests.post(
        memory + "/v1/recall", headers=headers, timeout=30, json={"query": "Na kojem jeziku da ti odgovaram?"}
    ).json()
    assert [e["id"] for e in recalled["entries"]] == [kept.json()["id"]]

    service = up_stack.token("--service", "system:serviceaccount:agentfn:agentfn-model")
    episode = requests.post(
        memory + "/internal/v1/episodes",
        headers={"Authorization": f"Bearer {service}"},
        json={"subject": "alice", "text": "Alice asked for answers in Croatian."},
        timeout=30,
    )
    assert episode.status_code == 201

    user = up_stack.token("bob", "--groups", "platform-users")
    tool = f"http://127.0.0.1:{base + 10}/v1/call"  # platform_status, run as the caller against its dev upstream
    # The caller's own token opens no tool; the model function's exchange (as it makes it, with its workload
    # token from var/secrets) gives one that does, and the dev upstream then decides by the caller's groups.
    assert (
        requests.post(tool, headers={"Authorization": f"Bearer {user}"}, json={"arguments": {}}, timeout=30).status_code
        == 401
    )
    exchange = TokenExchange(
        mode="exchange",
        url=f"http://127.0.0.1:{base + 1}/token",
        token_file=str(log.parent / "var" / "secrets" / "model" / "exchange-token"),
    )
    for caller, status in ((Caller("bob", ("platform-users",), user), 200), (Caller("alice", (), token), 403)):
        exchanged = exchange.token_for(caller, audience("tool", "platform_status"))
        print(caller.subject, json.dumps(jwt.decode(exchanged, options={"verify_signature": False})))  # shown with -s
        assert (
            requests.post(
                tool, headers={"Authorization": f"Bearer {exchanged}"}, json={"arguments": {}}, timeout=30
            ).status_code
            == status
        )
    assert (log.parent / "var" / "registry" / "registry.json").exists()

    # The admin doors, through the gateway, for the group the stack names admins.
    admin = up_stack.token("carol", "--groups", "platform-admins")
    grants = f"http://127.0.0.1:{base}/v1/admin/grants"
    answer = requests.get(grants, headers={"Authorization": f"Bearer {admin}"}, timeout=30)
    assert answer.status_code == 200 and answer.json()["rows"], answer.text
    assert requests.get(grants, headers=headers, timeout=30).status_code == 403  # alice is in no admin group

    # One key of the deployment, made once in var/secrets, names a caller alike in every part's log.
    key_file = log.parent / "var" / "secrets" / "subject-hash" / "key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    key = key_file.read_bytes().strip()

    def logged(part: str) -> set[str]:
        lines = (log.parent / "var" / "logs" / f"{part}.log").read_text().splitlines()
        return {json.loads(line).get("subject_hash") for line in lines if line.startswith("{")}

    def hashed(subject: str) -> str:
        return hmac.new(key, subject.encode(), hashlib.sha256).hexdigest()[:12]

    assert hashed("alice") in logged("memory") and hashed("carol") in logged("model")
    assert hashed("bob") in logged("platform_status")

    process.send_signal(signal.SIGINT)
    assert process.wait(60) == 0
    assert "stopped" in log.read_text()
    with pytest.raises(requests.ConnectionError):
        requests.get(memory + "/healthz", timeout=2)


WARMED = "engine's prompt cache warmed for code-reviewer, site-guide in"


def test_the_banner_does_not_wait_for_the_warm_up_and_a_turn_meanwhile_waits_and_is_told(up_stack):
    """The banner comes once the doors answer; the engine reads the agents' prompts behind it. A turn sent meanwhile
    waits for its agent's prompt to be read (rather than have the engine read it twice), and the CLI says so."""
    env, base, log = up_stack.env, up_stack.base, up_stack.log
    said = log.read_text()
    assert "agentfn is up" in said and WARMED not in said, said  # up before the warming is done
    assert "reading each agent's system prompt once" in said
    token = up_stack.token("alice", "--groups", "developers,platform-users")
    chat = subprocess.run(
        [str(BIN / "agentfn"), "chat", "code-reviewer", "--message", "Hello."],
        env={**env, "AGENTFN_TOKEN": token, "AGENTFN_URL": f"http://127.0.0.1:{base}"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "the engine is still reading the agent's prompt: the turn waits for it" in chat.stdout, chat.stdout
    assert chat.returncode == 0 and "agent>" in chat.stdout, chat.stdout + chat.stderr  # then it was answered
    said = log.read_text()
    assert said.index("agentfn is up") < said.index(WARMED), said  # the warming ended behind the banner


def test_the_engines_prompt_cache_holds_the_agents_system_prompts_once_it_is_up(up_stack):
    """The first turn reads only what is new, as later turns do: the engine was given the code reviewer's system
    prompt and tool listing, as the model function builds them for the tour's person, as the platform started."""
    base, log = up_stack.base, up_stack.log
    deadline = time.monotonic() + 300
    while WARMED not in log.read_text():  # the engine's slot is the warm-up's until then
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.5)
    token = up_stack.token("alice", "--groups", "developers,platform-users")
    turn = requests.post(
        f"http://127.0.0.1:{base}/v1/agents/code-reviewer/turns",
        headers={"Authorization": f"Bearer {token}"},
        json={"messages": [{"role": "user", "content": "How long should your answers be?"}]},
        stream=True,
        timeout=60,
    )
    try:
        assert turn.status_code == 200, turn.text
        deadline = time.monotonic() + 120
        while not (
            busy := [
                s
                for s in requests.get(f"http://127.0.0.1:{base + 5}/slots", timeout=5).json()
                if s.get("is_processing") and s.get("n_prompt_tokens")
            ]
        ):
            assert time.monotonic() < deadline, "the turn never reached the engine"
            time.sleep(0.1)
    finally:
        turn.close()  # the turn is cancelled: what it asked of the engine is all this test reads
    (slot,) = busy
    print({k: slot[k] for k in ("n_prompt_tokens", "n_prompt_tokens_cache")})  # shown with -s
    # What is new: the person's message in the chat template (a few dozen tokens), not the 900 of the system prompt.
    assert slot["n_prompt_tokens"] > 800 and slot["n_prompt_tokens"] - slot["n_prompt_tokens_cache"] < 50, slot


def test_killing_up_takes_every_part_with_it(up_stack):
    base, process = up_stack.base, up_stack.process
    os.kill(process.pid, signal.SIGKILL)
    process.wait(10)
    deadline = time.monotonic() + 30
    while any(_answers(base + offset) for offset in (0, 1, 2, 3, 4, 5, 10, 13)):  # gateway .. run_code
        assert time.monotonic() < deadline, "parts outlived agentfn up"
        time.sleep(0.2)


def _answers(port: int) -> bool:
    """Whether something listens on the port: it answers, or takes the connection and is slow to (a part still
    shutting down on a busy machine is alive, and asked again); only a refused connection is nothing there."""
    try:
        requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
        return True
    except requests.Timeout:
        return True
    except requests.ConnectionError:
        return False


def test_a_taken_port_is_a_clear_message(up_stack, tmp_path):
    """A second start on the same data by mistake: refused in one line, and the running platform stays whole."""
    env, base = up_stack.env, up_stack.base
    second = subprocess.run(
        [str(BIN / "agentfn"), "up", "--var", str(tmp_path / "var")], env=env, capture_output=True, text=True, timeout=60
    )
    assert second.returncode != 0
    assert "port already taken" in second.stderr and "Traceback" not in second.stderr
    # The refused start left the running platform whole, its database included.
    token = up_stack.token("carol")
    assert (
        requests.get(
            f"http://127.0.0.1:{base}/v1/entries", headers={"Authorization": f"Bearer {token}"}, timeout=30
        ).status_code
        == 200
    )


@pytest.mark.slow  # `agentfn up` as a process
def test_a_part_that_cannot_start_says_why_in_one_line(tmp_path):
    """A missing or misconfigured dependency: the part's own last words, the log to read, no traceback."""
    base = random.randrange(20000, 32000, 100)
    env = {
        **os.environ,
        "AGENTFN_DEV_PORT_BASE": str(base),
        "AGENTFN_EMBEDDING_MODEL": "no-such-model",
        "AGENTFN_TIER_FAST_URL": "http://127.0.0.1:9/v1",
    }  # an engine of one's own: none is started
    try:
        failed = subprocess.run(
            [str(BIN / "agentfn"), "up", "--var", str(tmp_path / "var")],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        EmbeddedPostgres(tmp_path / "var" / "postgres").stop("immediate")
    assert failed.returncode != 0 and "Traceback" not in failed.stderr
    assert "memory exited" in failed.stderr and "no-such-model" in failed.stderr
    assert "memory.log" in failed.stderr and "engine ready" not in failed.stderr
    assert not any(_answers(base + offset) for offset in (0, 1, 2, 4))  # what had started was stopped


@pytest.mark.slow  # `agentfn up` as a process
@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["agentfn", "up"],
            "AGENTFN_ENGINE_MODEL: unknown model 'nope'; the shipped models are smollm2-135m, "
            "qwen2.5-coder-0.5b, qwen2.5-coder-1.5b",
        ),
        (["python", "-m", "agentfn.devstack.engine_server"], "unknown model 'nope'"),
        (["python", "-m", "agentfn.devstack.weights", "install"], "unknown model 'nope'"),
    ],
    ids=["up", "engine_server", "install"],
)
@pytest.mark.parametrize("offline_model", ["nope", "qwen2.5-coder-0.5b"], ids=["unknown", "not_installed"])
def test_an_offline_model_that_cannot_be_served_is_one_line_and_nothing_starts(tmp_path, argv, says, offline_model):
    base = random.randrange(20000, 32000, 100)
    env = {
        **os.environ,
        "AGENTFN_DEV_PORT_BASE": str(base),
        "AGENTFN_ENGINE_MODEL": offline_model,
        "AGENTFN_ENGINE_MODELS_DIR": str(tmp_path / "models"),
        "AGENTFN_ENGINE_PORT": str(base + 5),
    }
    env.pop("AGENTFN_TIER_FAST_URL", None)
    if offline_model != "nope":
        if argv[-1] == "install":
            pytest.skip("installing is the install step's own work (./dev)")
        says = "the model qwen2.5-coder-0.5b is not installed: run"
    command = [str(BIN / argv[0]), *argv[1:]] + (["--var", str(tmp_path / "var")] if argv[-1] == "up" else [])
    failed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert failed.returncode != 0 and "Traceback" not in failed.stderr
    assert says in failed.stderr and len(failed.stderr.strip().splitlines()) == 1, failed.stderr
    assert "Postgres on" not in failed.stdout and not _answers(base + 5) and not _answers(base + 99)
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())
