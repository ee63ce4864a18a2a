"""The registry reader against the operator's own output and schema: the two parts read one document."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from support.model import access, registry_document, take_turn

from agentfn.model.registry import Registry, parse
from agentfn.operator import catalog
from agentfn.operator.local import read_objects
from agentfn.operator.reconcile import reconcile
from agentfn.shared.contract import RegistryInvalid
from agentfn.shared.identity import Caller

ROOT = Path(__file__).resolve().parent.parent.parent
SCHEMA = json.loads((ROOT / "src" / "agentfn" / "shared" / "contract" / "registry.schema.json").read_text())


def test_the_test_registry_is_one_the_operator_could_write():
    Draft202012Validator.check_schema(SCHEMA)  # the model function trusts the schema it validates with
    errors = list(Draft202012Validator(SCHEMA).iter_errors(registry_document()))
    assert not errors, [e.message for e in errors]


def test_the_operators_registry_of_the_examples_reads_as_the_seed_agents():
    agents, grants = read_objects([ROOT / "examples"])
    document = reconcile(catalog.load(), agents, grants).registry
    table = parse(json.loads(json.dumps(document)))
    developer = Caller("dev", ("developers",), "t")
    visitor = Caller("visitor", (), "t")
    reviewer = table.agent_for("code-reviewer", developer)
    assert reviewer is not None and reviewer.memory == "facts" and reviewer.steps == 4
    assert set(reviewer.granted_tools(developer)) == {"run_code", "platform_status", "open_page", "remember", "forget"}
    assert set(reviewer.granted_tools(visitor)) == {"platform_status"}
    guide = table.agent_for("site-guide", visitor)
    assert guide is not None and guide.memory == "none" and set(guide.tools) == {"platform_status"}
    assert set(table.alone) == set(table.mcp) == {"platform_status"}


def broken(change):
    document = copy.deepcopy(registry_document())
    change(document)
    return document


@pytest.mark.parametrize(
    "document",
    [
        broken(lambda d: d.update(apiVersion="agentfn.dev/v2")),
        broken(lambda d: d.pop("alone")),
        broken(lambda d: d["agents"]["guide"]["limits"].update(steps=5)),
        broken(lambda d: d["agents"]["guide"].update(memory="everything")),
        broken(lambda d: d["agents"]["guide"]["limits"].update(deadlineSeconds=True)),
        broken(lambda d: d["agents"]["guide"]["tools"]["platform_status"].update(dailyLimit=0)),
        broken(lambda d: d["agents"]["guide"]["tools"]["platform_status"].update(groups="everyone")),
        broken(lambda d: d["alone"].update({"Bad-Name": d["alone"]["platform_status"]})),
        broken(lambda d: d["agents"]["guide"].update(extra="a field no schema names")),
        broken(lambda d: d["agents"]["guide"].update(brief="x" * 4001)),
        broken(lambda d: d.update(revision="r1")),
        [],
    ],
    ids=[
        "api_version",
        "no_alone",
        "five_steps",
        "memory_mode",
        "bool_deadline",
        "zero_limit",
        "groups_string",
        "tool_name",
        "unknown_field",
        "brief_too_long",
        "revision_not_a_digest",
        "not_an_object",
    ],
)
def test_a_document_outside_the_registrys_shape_is_refused_whole(document):
    with pytest.raises(RegistryInvalid):
        parse(document)


def test_a_refusal_says_where_the_registry_breaks_and_never_what_it_held():
    document = registry_document()
    document["agents"]["guide"]["tools"] = {"platform_status": {**access(), "subjects": "ana@example.org"}}
    with pytest.raises(RegistryInvalid) as refused:
        parse(document)
    assert "agents.guide.tools.platform_status.subjects" in str(refused.value)
    assert "ana@example.org" not in str(refused.value)


@pytest.mark.parametrize(
    ("subject", "groups", "admitted"),
    [
        ("ana", (), True),  # by subject
        ("bo", ("ops",), True),  # by group
        ("cy", ("other",), False),
        ("dee", (), False),
    ],
)
def test_who_an_access_entry_admits(subject, groups, admitted):
    document = registry_document()
    document["agents"]["guide"]["tools"]["platform_status"] = {
        "subjects": ["ana"],
        "groups": ["ops"],
        "dailyLimit": None,
        "grant": "g",
    }
    table = parse(document)
    assert (table.agent_for("guide", Caller(subject, groups, "t")) is not None) is admitted


def test_a_broken_file_keeps_the_last_good_table(tmp_path, monkeypatch):
    import agentfn.model.registry as registry

    monkeypatch.setattr(registry, "RECHECK", 0.0)
    path = tmp_path / "registry.json"
    reader = Registry(str(path))
    assert not reader.ready()  # no file yet: nothing is granted
    path.write_text(json.dumps(registry_document()))
    assert reader.ready() and "guide" in reader.table().agents
    path.write_text('{"apiVersion": "half a file')
    assert reader.ready() and "guide" in reader.table().agents
    document = registry_document()
    del document["agents"]["guide"]
    path.write_text(json.dumps(document))
    assert "guide" not in reader.table().agents


def test_the_built_in_tools_are_the_contracts_for_the_operator_and_the_model_function_alike(model, scripted_engine, person):
    """The contract files are the one source: the operator catalogs their tools, the model function offers them."""
    written = {}
    for name in ("memory.json", "page.json"):
        data = json.loads((ROOT / "src" / "agentfn" / "shared" / "contract" / name).read_text())
        written |= {d["name"]: (data["function"], d) for d in data["tools"]}
    catalogued = catalog.load()
    assert {name: catalogued[name].function for name in written} == {name: f for name, (f, _) in written.items()}
    assert all(catalogued[name].channels == {"step"} for name in written)
    sid = scripted_engine.script({"text": "Nothing to do."})
    response, _ = take_turn(model.url, person, "keeper", f"Hello. script:{sid}")  # keeps facts: no tool narrowed
    assert response.status_code == 200, response.text
    offered = {t["function"]["name"]: t["function"] for t in scripted_engine.requests(sid)[0]["tools"]}
    for name, (_, descriptor) in written.items():
        assert offered[name]["description"] == descriptor["description"]
        assert offered[name]["parameters"] == descriptor["input_schema"]
