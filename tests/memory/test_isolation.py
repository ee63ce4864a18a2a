"""No subject ever sees, edits or deletes another's entry: through the doors, and by the database alone."""

import secrets

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from agentfn.devstack.harness.servers import Client

WORDS = st.sampled_from(["ledger", "port", "deploy", "Croatian", "tabs", "backup", "mačka", "staging", "review"])
TEXTS = st.lists(WORDS, min_size=1, max_size=6).map(" ".join)


@pytest.fixture
def machine(memory, issuer):
    # Subjects are drawn as indices: each example gets fresh subjects, so the database holds no earlier example.
    subjects = [0, 1, 2]

    class Subjects(RuleBasedStateMachine):
        """Random keeps, corrections, forgets and recalls by three subjects, against a model of who owns what."""

        entries = Bundle("entries")

        def __init__(self):
            super().__init__()
            names = [f"prop-{secrets.token_hex(4)}-{n}" for n in subjects]
            self.clients = [Client(memory.url, issuer.headers(name)) for name in names]
            self.owned = {s: {} for s in subjects}  # subject -> id -> text

        def same_note(self, subject, text, but=None):
            """The subject's entry that already says this note (the texts here differ only in case), if any."""
            return next((i for i, t in self.owned[subject].items() if t.casefold() == text.casefold() and i != but), None)

        @rule(target=entries, subject=st.sampled_from(subjects), text=TEXTS)
        def keep(self, subject, text):
            known = self.same_note(subject, text)
            response = self.clients[subject].post("/v1/entries", json={"kind": "fact", "text": text, "source": "p"})
            assert response.status_code == (200 if known else 201)
            entry = response.json()
            if known:
                assert entry["id"] == known and entry["existing"] is True
            self.owned[subject][entry["id"]] = entry["text"]
            return (subject, entry["id"])

        @rule(entry=entries, actor=st.sampled_from(subjects), text=TEXTS)
        def correct(self, entry, actor, text):
            owner, entry_id = entry
            response = self.clients[actor].patch(f"/v1/entries/{entry_id}", json={"text": text})
            if actor != owner or entry_id not in self.owned[owner]:
                assert response.status_code == 404
            elif self.same_note(owner, text, but=entry_id):
                assert response.status_code == 409  # it would repeat another entry's note
            else:
                assert response.status_code == 200
                self.owned[owner][entry_id] = text

        @rule(entry=consumes(entries), actor=st.sampled_from(subjects))
        def forget(self, entry, actor):
            owner, entry_id = entry
            response = self.clients[actor].delete(f"/v1/entries/{entry_id}")
            if actor == owner and entry_id in self.owned[owner]:
                assert response.status_code == 204
                del self.owned[owner][entry_id]
            else:
                assert response.status_code == 404

        @rule(actor=st.sampled_from(subjects), query=TEXTS)
        def recall(self, actor, query):
            found = self.clients[actor].post("/v1/recall", json={"query": query}).json()["entries"]
            assert {e["id"] for e in found} <= set(self.owned[actor])

        @invariant()
        def each_lists_exactly_their_own(self):
            for subject in subjects:
                listed = self.clients[subject].get("/v1/entries").json()["entries"]
                assert {e["id"]: e["text"] for e in listed} == self.owned[subject]

    return Subjects


def test_no_subject_touches_another_subjects_entries(machine):
    run = settings(max_examples=8, stateful_step_count=12, deadline=None, suppress_health_check=list(HealthCheck))(
        machine
    ).TestCase
    run().runTest()


def as_memory_role(memory_env, subject):
    conn = psycopg.connect(memory_env["AGENTFN_DATABASE_URL"], options="-c search_path=memory,public")
    if subject is not None:
        conn.execute("SELECT set_config('agentfn.subject', %s, true)", (subject,))
    return conn


def test_row_level_security_alone_keeps_subjects_apart(memory, memory_env, issuer):
    alice, bob = f"alice-{secrets.token_hex(3)}", f"bob-{secrets.token_hex(3)}"
    for subject in (alice, bob):
        Client(memory.url, issuer.headers(subject)).post(
            "/v1/entries", json={"kind": "fact", "text": f"note of {subject}", "source": "s"}
        )
    # A query that forgets the subject filter still sees only the transaction's subject.
    with as_memory_role(memory_env, alice) as conn:
        rows = conn.execute("SELECT subject, text FROM entries").fetchall()
        assert rows and {r[0] for r in rows} == {alice}
        assert conn.execute("UPDATE entries SET source = 'x' WHERE subject = %s", (bob,)).rowcount == 0
        assert conn.execute("DELETE FROM entries WHERE subject = %s", (bob,)).rowcount == 0
    with as_memory_role(memory_env, alice) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(
            "INSERT INTO entries (id, subject, kind, text, source, model, embedding) "
            "VALUES (gen_random_uuid(), %s, 'fact', 'planted', 's', 'm', '[1,0]')",
            (bob,),
        )
    # No subject set: nothing at all, even for the table's owner.
    with as_memory_role(memory_env, None) as conn:
        assert conn.execute("SELECT count(*) FROM entries").fetchone()[0] == 0
    # Bob's note is untouched.
    bob_entries = Client(memory.url, issuer.headers(bob)).get("/v1/entries").json()["entries"]
    assert [e["source"] for e in bob_entries] == ["s"]


def test_memory_role_cannot_escape_its_schema(memory_env):
    with as_memory_role(memory_env, None) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE TABLE public.stash (x text)")
        conn.rollback()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("ALTER ROLE current_user BYPASSRLS")
