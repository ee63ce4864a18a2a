"""What the chart promises, read off its rendered objects: scale to zero, cluster-local internals, probes
and limits, gVisor for run_code, routes for the public doors only, the service identity wired end to end,
one role and schema per part, only settings the code reads, and the same names as the operator and func.yaml."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from support import TOOLS
from support.chart import FUNCTIONS, NAMESPACE, ROOT, VALUES_SETS, env_of, knative_services, objects

from agentfn.operator.config import Config
from agentfn.operator.network import MODEL_FUNCTION

CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()
INTERNAL = {"page", *TOOLS}
DB_PARTS = {"memory", "page", "run_code", "model"}
SETS = list(VALUES_SETS)


def pod_spec(service: dict) -> dict:
    return service["spec"]["template"]["spec"]


@pytest.mark.parametrize("values_set", SETS)
def test_every_function_is_a_knative_service_that_scales_to_zero(values_set):
    services = knative_services(values_set)
    assert sorted(services) == sorted(FUNCTIONS)
    for fn, service in services.items():
        annotations = service["spec"]["template"]["metadata"]["annotations"]
        assert annotations["autoscaling.knative.dev/min-scale"] == "0", fn
        visibility = service["metadata"]["labels"].get("networking.knative.dev/visibility")
        assert visibility == ("cluster-local" if fn in INTERNAL else None), fn
        container = pod_spec(service)["containers"][0]
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert {"cpu", "memory"} <= set(container["resources"]["limits"]), fn
        assert {"memory"} <= set(container["resources"]["requests"]), fn
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["runAsNonRoot"] is True
        assert pod_spec(service)["automountServiceAccountToken"] is False
        assert "PORT" not in env_of(service)  # Knative sets it


@pytest.mark.parametrize("values_set", SETS)
def test_run_code_runs_under_gvisor_with_bubblewrap_inside(values_set):
    services = knative_services(values_set)
    assert pod_spec(services["run_code"])["runtimeClassName"] == "gvisor"
    assert env_of(services["run_code"])["AGENTFN_RUN_CODE_BACKEND"] == "bubblewrap"
    assert [fn for fn, s in services.items() if "runtimeClassName" in pod_spec(s)] == ["run_code"]


def test_the_runtime_class_is_gvisor_on_runsc_when_asked():
    assert objects("default", "RuntimeClass") == []
    [runtime] = objects("cnpg", "RuntimeClass")
    assert (runtime["metadata"]["name"], runtime["handler"]) == ("gvisor", "runsc")


EXPECTED_ROUTES = {
    "agentfn-memory": [("PathPrefix", "/v1/entries"), ("Exact", "/v1/recall")],
    "agentfn-model": [
        ("PathPrefix", "/v1/agents"),
        ("PathPrefix", "/v1/tools"),
        ("PathPrefix", "/mcp"),
        ("PathPrefix", "/v1/admin"),
        ("Exact", "/.well-known/oauth-protected-resource"),
        ("Exact", "/.well-known/oauth-protected-resource/mcp"),
    ],
    "agentfn-workbench": [("Exact", "/"), ("PathPrefix", "/assets"), ("Exact", "/workbench.json")],
}


@pytest.mark.parametrize("values_set", ["default", "cnpg"])
def test_routes_are_the_public_doors_only(values_set):
    routes = {r["metadata"]["name"]: r for r in objects(values_set, "HTTPRoute")}
    seen = {}
    for name, route in routes.items():
        [parent] = route["spec"]["parentRefs"]
        assert (parent["kind"], parent["name"], parent["namespace"]) == ("Gateway", "platform-gateway", "gateway-system")
        [rule] = route["spec"]["rules"]
        assert [b["name"] for b in rule["backendRefs"]] == [name]
        seen[name] = [(m["path"]["type"], m["path"]["value"]) for m in rule["matches"]]
    assert seen == EXPECTED_ROUTES
    assert not any("/internal" in value for paths in seen.values() for _, value in paths)


@pytest.mark.parametrize(
    ("sets", "groups"),
    [
        ((), "platform-admins"),
        (("functions.model.adminGroups={auditors,sre-leads}",), "auditors,sre-leads"),
        (("functions.model.adminGroups={a\\,b}",), None),
    ],
)
def test_the_admin_groups_reach_the_model_function_and_the_page_fetcher(sets, groups):
    if groups is None:  # a group with a comma would read as two: the schema refuses it
        with pytest.raises(AssertionError, match="adminGroups"):
            objects("default", "Service", sets)
        return
    for part in ("model", "page"):
        [service] = [
            s
            for s in objects("default", "Service", sets)
            if s["apiVersion"] == "serving.knative.dev/v1" and s["metadata"]["labels"]["app.kubernetes.io/component"] == part
        ]
        assert env_of(service)["AGENTFN_ADMIN_GROUPS"] == groups, part


def test_no_routes_when_the_gateway_is_off():
    assert objects("minimal", "HTTPRoute") == []


@pytest.mark.parametrize("values_set", SETS)
def test_the_service_identity_is_wired_from_the_model_function_to_memory(values_set):
    services = knative_services(values_set)
    model, memory = services["model"], services["memory"]
    token_file = env_of(model)["AGENTFN_SERVICE_TOKEN_FILE"]
    assert token_file == "/var/run/secrets/agentfn/memory-token"  # the code's default, said aloud
    mount = next(m for m in pod_spec(model)["containers"][0]["volumeMounts"] if m["name"] == "memory-token")
    volume = next(v for v in pod_spec(model)["volumes"] if v["name"] == "memory-token")
    [source] = volume["projected"]["sources"]
    assert source["serviceAccountToken"]["audience"] == "agentfn-memory"
    assert f"{mount['mountPath']}/{source['serviceAccountToken']['path']}" == token_file
    account = pod_spec(model)["serviceAccountName"]
    memory_env = env_of(memory)
    assert memory_env["AGENTFN_TRUSTED_SERVICE_ACCOUNTS"] == f"system:serviceaccount:{NAMESPACE}:{account}"
    assert memory_env["AGENTFN_SERVICE_JWT_AUDIENCE"] == "agentfn-memory"
    assert memory_env["AGENTFN_SERVICE_JWKS_URL"].endswith("/openid/v1/jwks")
    kube = next(v for v in pod_spec(memory)["volumes"] if v["name"] == "kube")
    paths = {s.get("serviceAccountToken", {}).get("path") for s in kube["projected"]["sources"]}
    assert Path(memory_env["AGENTFN_SERVICE_JWKS_TOKEN_FILE"]).name in paths
    # the registry the operator writes, where the model function reads it
    registry = next(v for v in pod_spec(model)["volumes"] if v["name"] == "registry")
    assert registry["configMap"]["name"] == Config(namespace=NAMESPACE).configmap
    reg_mount = next(m for m in pod_spec(model)["containers"][0]["volumeMounts"] if m["name"] == "registry")
    assert env_of(model)["AGENTFN_REGISTRY_FILE"] == f"{reg_mount['mountPath']}/registry.json"
    assert {o["metadata"]["name"] for o in objects(values_set, "ServiceAccount")} >= {account}
    # The model function's own service door (the engines' warm-up: unmetered rounds) trusts no account in a cluster.
    assert "AGENTFN_TRUSTED_SERVICE_ACCOUNTS" not in env_of(model)


@pytest.mark.parametrize("values_set", SETS)
def test_the_model_function_finds_every_part_by_its_service_name(values_set):
    services = knative_services(values_set)
    env = env_of(services["model"])
    names = {fn: s["metadata"]["name"] for fn, s in services.items()}
    assert env["AGENTFN_MEMORY_URL"] == f"http://{names['memory']}.{NAMESPACE}.svc.cluster.local"
    assert env["AGENTFN_PAGE_URL"] == f"http://{names['page']}.{NAMESPACE}.svc.cluster.local"
    for tool in TOOLS:
        assert env[f"AGENTFN_TOOL_{tool.upper()}_URL"] == f"http://{names[tool]}.{NAMESPACE}.svc.cluster.local"
    for tier in env["AGENTFN_TIERS"].split(","):
        assert env[f"AGENTFN_TIER_{tier.upper()}_URL"].startswith("http")


@pytest.mark.parametrize("values_set", [s for s in SETS if s != "minimal"])
def test_the_operator_selects_the_pods_the_chart_names(values_set):
    [deployment] = objects(values_set, "Deployment")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    config = Config.from_env({"AGENTFN_NAMESPACE": NAMESPACE, "AGENTFN_FUNCTION_PREFIX": env["AGENTFN_FUNCTION_PREFIX"]})
    services = knative_services(values_set)
    assert {fn: config.function_service(fn) for fn in FUNCTIONS} == {fn: s["metadata"]["name"] for fn, s in services.items()}
    assert config.function_service(MODEL_FUNCTION) == services["model"]["metadata"]["name"]
    # the descriptors the catalog reads, each back at <function>/tool.json
    [tools] = [c for c in objects(values_set, "ConfigMap") if c["metadata"]["name"] == "agentfn-tool-descriptors"]
    for tool in TOOLS:
        assert tools["data"][f"{tool}.json"] == (ROOT / "src/agentfn" / tool / "tool.json").read_text()


def test_the_operator_rbac_is_the_reviewed_one():
    reviewed = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "operator/deploy/rbac.yaml").read_text()) if d}
    [role] = objects("default", "Role")
    assert role["rules"] == reviewed["Role"]["rules"]
    [binding] = objects("default", "RoleBinding")
    assert binding["roleRef"] == reviewed["RoleBinding"]["roleRef"]
    assert [s["name"] for s in binding["subjects"]] == [s["name"] for s in reviewed["RoleBinding"]["subjects"]]


@pytest.mark.parametrize("values_set", SETS)
def test_the_parts_that_keep_data_have_a_database(values_set):
    services = knative_services(values_set)
    with_db = {fn for fn, s in services.items() if "AGENTFN_DATABASE_URL" in env_of(s)}
    assert with_db == DB_PARTS


def test_cnpg_gives_each_part_its_own_role_and_schema():
    [cluster] = objects("cnpg", "Cluster")
    roles = {r["name"]: r for r in cluster["spec"]["managed"]["roles"]}
    assert set(roles) == {f"agentfn_{p}" for p in DB_PARTS}
    assert all(r["login"] and not r["superuser"] and not r["bypassrls"] for r in roles.values())
    sql = cluster["spec"]["bootstrap"]["initdb"]["postInitApplicationSQL"]
    assert "CREATE EXTENSION IF NOT EXISTS vector SCHEMA public" in sql
    for part in DB_PARTS:
        assert f"CREATE SCHEMA {part} AUTHORIZATION agentfn_{part}" in sql
    secrets = {
        s["metadata"]["name"]
        for s in objects("cnpg", "Secret")
        if not s["metadata"]["name"].endswith((APPROVAL_KEY, SUBJECT_HASH_KEY))
    }
    assert {r["passwordSecret"]["name"] for r in roles.values()} == secrets
    services = knative_services("cnpg")
    for part in DB_PARTS:
        dsn = env_of(services[part])["AGENTFN_DATABASE_URL"]
        assert (
            dsn.startswith(f"postgresql://agentfn_{part}@agentfn-postgres-rw.{NAMESPACE}.svc")
            and ":" not in dsn.split("@")[0][13:]
        )
        assert env_of(services[part])["PGPASSWORD"]["secretKeyRef"]["name"] in secrets


def test_an_external_database_is_a_dsn_secret_per_part():
    assert objects("external", "Cluster") == []
    # The keys the chart makes (this set's prefix is empty), and no database's.
    assert [s["metadata"]["name"] for s in objects("external", "Secret")] == [APPROVAL_KEY, SUBJECT_HASH_KEY]
    services = knative_services("external")
    refs = {fn: env_of(services[fn])["AGENTFN_DATABASE_URL"]["secretKeyRef"] for fn in DB_PARTS}
    assert refs["memory"] == {"name": "memory-dsn", "key": "dsn"}
    assert refs["page"] == {"name": "page-db", "key": "dsn"}  # the default name, with this set's empty prefix


def documented_names() -> set[str]:
    return set(re.findall(r"`(AGENTFN_[A-Z0-9_]+)`", CONFIGURATION))


BUILT = [
    r"AGENTFN_TOOL_[A-Z0-9_]+_(URL|AUDIENCE)",
    r"AGENTFN_TIER_[A-Z0-9]+_(URL|MODEL|API_KEY_FILE|TOOL_MODE|DEADLINE_SECONDS|"
    r"MAX_TOKENS|CONTEXT_TOKENS|TEMPERATURE)",
]


def known(name: str) -> bool:
    return name in documented_names() or any(re.fullmatch(p, name) for p in BUILT)


def test_the_setting_check_bites():
    assert known("AGENTFN_DATABASE_URL") and known("AGENTFN_TIER_LARGE_API_KEY_FILE")
    assert not known("AGENTFN_DATABASE_DSN") and not known("AGENTFN_TIER_FAST_COLOUR")


@pytest.mark.parametrize("values_set", SETS)
def test_every_setting_the_chart_sets_is_one_the_code_reads(values_set):
    names = set()
    for obj in objects(values_set):
        if obj["kind"] in ("Service", "Deployment") and "template" in obj.get("spec", {}):
            for container in obj["spec"]["template"]["spec"]["containers"]:
                names |= {e["name"] for e in container.get("env", [])}
    agentfn = {n for n in names if n.startswith("AGENTFN_")}
    assert len(agentfn) > 20
    assert sorted(n for n in agentfn if not known(n)) == []
    assert names - agentfn <= {"PGPASSWORD"}  # libpq's own, so no DSN holds a password


FUNC_YAML = {fn: yaml.safe_load((ROOT / "functions" / fn / "func.yaml").read_text()) for fn in FUNCTIONS}


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_func_yaml_agrees_with_the_chart(fn):
    service = knative_services("default")[fn]
    descriptor = FUNC_YAML[fn]
    assert descriptor["name"] == service["metadata"]["name"]
    assert descriptor["deploy"]["namespace"] == NAMESPACE
    assert descriptor["deploy"]["annotations"]["autoscaling.knative.dev/min-scale"] == "0"
    if "serviceAccountName" in descriptor["deploy"]:
        assert descriptor["deploy"]["serviceAccountName"] == pod_spec(service)["serviceAccountName"]
    chart_env = env_of(service)
    for entry in descriptor.get("run", {}).get("envs", []):
        name = entry["name"]
        assert known(name), name
        if name.endswith("_URL") and name.startswith(("AGENTFN_MEMORY", "AGENTFN_PAGE", "AGENTFN_TOOL_")):
            assert entry["value"] == chart_env[name]


APPROVAL_KEY = "model-approval-key"
SUBJECT_HASH_KEY = "subject-hash-key"


@pytest.mark.parametrize("values_set", ["default", "external"])
def test_the_model_function_signs_approvals_with_a_key_from_a_secret_the_chart_makes_once(values_set):
    [secret] = [s for s in objects(values_set, "Secret") if s["metadata"]["name"].endswith(APPROVAL_KEY)]
    assert len(secret["data"]["key"]) >= 64  # base64 of 64 random characters
    model = knative_services(values_set)["model"]
    env = env_of(model)
    assert env["AGENTFN_APPROVAL_KEY_FILE"] == "/var/run/secrets/agentfn/approval/key"
    assert env["AGENTFN_APPROVAL_SECONDS"] == "300"
    spec = pod_spec(model)
    volume = next(v for v in spec["volumes"] if v["name"] == "approval-key")
    assert volume["secret"] == {"secretName": secret["metadata"]["name"], "items": [{"key": "key", "path": "key"}]}
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "approval-key")
    assert mount == {"name": "approval-key", "mountPath": "/var/run/secrets/agentfn/approval", "readOnly": True}
    assert not any(
        "approval" in m["name"]
        for fn, s in knative_services(values_set).items()
        if fn != "model"
        for m in pod_spec(s)["containers"][0].get("volumeMounts", [])
    )


def test_an_existing_secret_holds_the_approval_key_instead():
    sets = ("approvals.existingSecret=my-approval-key", "approvals.seconds=120")
    assert not [s for s in objects("default", "Secret", sets) if s["metadata"]["name"].endswith(APPROVAL_KEY)]
    [model] = [
        d
        for d in objects("default", "Service", sets)
        if d["apiVersion"] == "serving.knative.dev/v1" and d["metadata"]["name"].endswith("model")
    ]
    assert (
        next(v for v in pod_spec(model)["volumes"] if v["name"] == "approval-key")["secret"]["secretName"]
        == "my-approval-key"
    )
    assert env_of(model)["AGENTFN_APPROVAL_SECONDS"] == "120"


@pytest.mark.parametrize("values_set", SETS)
def test_every_function_names_callers_with_one_key_from_a_secret_the_chart_makes_once(values_set):
    [secret] = [s for s in objects(values_set, "Secret") if s["metadata"]["name"].endswith(SUBJECT_HASH_KEY)]
    assert len(secret["data"]["key"]) >= 64  # base64 of 64 random characters
    services = knative_services(values_set)
    # Every function that takes callers; the workbench serves a page and names no one.
    assert set(services) == set(FUNCTIONS)
    for fn, service in services.items():
        spec = pod_spec(service)
        if fn == "workbench":
            assert "AGENTFN_SUBJECT_HASH_KEY_FILE" not in env_of(service)
            assert not [v for v in spec.get("volumes", []) if v["name"] == SUBJECT_HASH_KEY]
            continue
        assert env_of(service)["AGENTFN_SUBJECT_HASH_KEY_FILE"] == "/var/run/secrets/agentfn/subject-hash/key", fn
        volume = next(v for v in spec["volumes"] if v["name"] == SUBJECT_HASH_KEY)
        assert volume["secret"] == {"secretName": secret["metadata"]["name"], "items": [{"key": "key", "path": "key"}]}
        mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == SUBJECT_HASH_KEY)
        assert mount == {"name": SUBJECT_HASH_KEY, "mountPath": "/var/run/secrets/agentfn/subject-hash", "readOnly": True}


def test_an_existing_secret_holds_the_subject_hash_key_instead():
    sets = ("subjectHash.existingSecret=my-subject-hash-key",)
    assert not [s for s in objects("default", "Secret", sets) if s["metadata"]["name"].endswith(SUBJECT_HASH_KEY)]
    services = [s for s in objects("default", "Service", sets) if s["apiVersion"] == "serving.knative.dev/v1"]
    for service in services:
        if service["metadata"]["labels"]["app.kubernetes.io/component"] != "workbench":
            volume = next(v for v in pod_spec(service)["volumes"] if v["name"] == SUBJECT_HASH_KEY)
            assert volume["secret"]["secretName"] == "my-subject-hash-key"


@pytest.mark.parametrize(
    ("sets", "exported"),
    [
        ((), False),
        (
            (
                "telemetry.endpoint=http://otel-collector.observability:4318",
                "telemetry.headersSecret=otlp-headers",
                "telemetry.egress.namespaces={observability}",
            ),
            True,
        ),
    ],
)
def test_telemetry_reaches_every_function_only_when_a_collector_is_named(sets, exported):
    services = [s for s in objects("default", "Service", sets) if s["apiVersion"] == "serving.knative.dev/v1"]
    policies = [p for p in objects("default", "NetworkPolicy", sets) if p["metadata"]["name"].endswith("-telemetry")]
    for service in services:
        env = {e["name"]: e for e in pod_spec(service)["containers"][0].get("env", [])}
        otel = {n for n in env if n.startswith("OTEL_")}
        if not exported:
            assert otel == set()
            continue
        component = service["metadata"]["labels"]["app.kubernetes.io/component"]
        if component == "workbench":  # the static page of a browser app: nothing of a turn runs there
            assert otel == set()
            continue
        assert otel == {
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_SERVICE_NAME",
            "OTEL_SEMCONV_STABILITY_OPT_IN",
            "OTEL_EXPORTER_OTLP_HEADERS",
        }, component
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == "http://otel-collector.observability:4318"
        assert env["OTEL_SEMCONV_STABILITY_OPT_IN"]["value"] == "gen_ai_latest_experimental"
        assert env["OTEL_EXPORTER_OTLP_HEADERS"]["valueFrom"]["secretKeyRef"] == {"name": "otlp-headers", "key": "headers"}
    assert len(policies) == (7 if exported else 0)
    for policy in policies:
        [rule] = policy["spec"]["egress"]
        assert rule["ports"] == [{"protocol": "TCP", "port": 4318}]
