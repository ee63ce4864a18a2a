"""What makes a test slow, for `-m "not slow"`: it uses a fixture that starts processes (tests/conftest.py marks it).

Starting a function under gunicorn, a kube-apiserver, Chromium, the page fetcher's lab, `agentfn up` or podman's
platform takes seconds, and the tests that use them wait on real processes. A test that starts one in its own body
says so with `@pytest.mark.slow`; tests/test_slow_marks.py checks that no fixture starting one is left out of the
table, and that every fixture name is defined once in the suite, so a name here means one fixture.
"""

from __future__ import annotations

# The fixtures that start processes. Roots only: a fixture that takes one of these (model_env takes memory, say) is
# in the closure of every test that uses it, which pytest gives as `item.fixturenames`.
STARTS_PROCESSES = frozenset(
    {
        # tests/conftest.py
        "apiserver",
        "memory",
        "workbench",
        "browser",
        "read_tools",
        "run_code",
        "model_read_tools",
        "page_fetcher",
        "model",
        "frugal_model",
        "gateway",
        "lab",
        # a folder's conftest or a test module's own
        "lab_fetcher",
        "workbench_stack",
        "image_platform",
        "probed_stack",
        "up_stack",
        "upgrade_kube",
        "newcomer_platform",
        "own_database",
        "limited",
        "minilm_memory",
        "offline_engine",
        "non_root",
        "service",  # asks for run_code or non_root as it runs
        "traced_run_code",
        "gvisor",
    }
)


def starts_processes(item) -> bool:
    """Whether the test uses a fixture of the table, itself or through another fixture. A fixture asked for by name as
    the test runs (`request.getfixturevalue`) is not in the closure: the fixture asking is in the table."""
    return not STARTS_PROCESSES.isdisjoint(item.fixturenames)


# What a fixture calls to start a process (the names tests/test_slow_marks.py looks for).
STARTERS = frozenset(
    {"Gunicorn", "NonRootGunicorn", "PageFunction", "GatewayServer", "Popen", "KubeAPI", "Platform", "launch"}
)
