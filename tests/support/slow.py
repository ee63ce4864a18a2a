"""What makes a test slow, for `-m "not slow"`: it uses a fixture that starts processes (tests/conftest.py marks it).

Starting a function under gunicorn, a kube-apiserver, Chromium, the page fetcher's lab, `agentfn up` or podman's
platform takes seconds, and the tests that use them wait on real processes. A test that starts one in its own body
says so with `@pytest.mark.slow`; tests/test_slow_marks.py checks that no fixture starting one is left out of the
table.
"""

from __future__ import annotations

# The fixtures that start processes, by where each is defined (the folder of its conftest, or its test module). Roots
# only: a fixture that depends on one of these (model_env on memory, say) is in the closure of every test using it.
STARTS_PROCESSES = {
    "tests": {"apiserver", "memory", "workbench", "browser"},
    "tests/model": {"tools", "page", "model", "frugal_model", "gateway"},
    "tests/tools": {"tools", "run_code"},
    "tests/page": {"lab"},
    "tests/workbench": {"stack"},
    "tests/images": {"platform"},
    "tests/images/test_packages.py": {"lab"},
    "tests/chart/test_probe.py": {"stack"},
    "tests/chart/test_upgrade.py": {"kube"},
    "tests/e2e/test_newcomer.py": {"platform"},
    "tests/memory/test_outage.py": {"own_database"},
    "tests/memory/test_quotas.py": {"limited"},
    "tests/memory/test_reembed.py": {"minilm_memory"},
    "tests/model/test_offline_engine.py": {"offline_engine"},
    "tests/tools/test_run_code.py": {"non_root", "service"},  # `service` asks for run_code or non_root as it runs
    "tests/tools/test_run_code_telemetry.py": {"traced_run_code"},
    "tests/tools/test_runsc.py": {"gvisor"},
    "tests/test_stack.py": {"stack"},
}


def starts_processes(item) -> bool:
    """Whether the test uses a fixture of the table, itself or through another fixture."""
    # The fixture in force for each name (a folder's or module's own overrides the one above it): the operator's
    # `tools` is the tool catalog, the model function's the tool functions under gunicorn. A fixture asked for by
    # name as the test runs (`request.getfixturevalue`) is not in the closure: the fixture asking is in the table.
    for name, definitions in item._fixtureinfo.name2fixturedefs.items():
        if definitions and name in STARTS_PROCESSES.get(definitions[-1].baseid, ()):
            return True
    return False


# What a fixture calls to start a process (the names tests/test_slow_marks.py looks for).
STARTERS = frozenset(
    {"Gunicorn", "NonRootGunicorn", "PageFunction", "GatewayServer", "Popen", "KubeAPI", "Platform", "launch"}
)
