"""Forgetting is deletion: after a forget, no table anywhere holds the entry's text, vector or id."""

import psycopg


def scan(admin_dsn, needles):
    """Every row of every user table in the database, as text, searched for each needle."""
    hits = []
    with psycopg.connect(admin_dsn) as conn:
        tables = conn.execute(
            "SELECT schemaname, tablename FROM pg_tables "
            "WHERE schemaname NOT IN ('pg_catalog', 'information_schema')").fetchall()
        assert ("memory", "entries") in tables
        for schema, table in tables:
            for needle in needles:
                found = conn.execute(
                    f'SELECT count(*) FROM "{schema}"."{table}" t WHERE strpos(row_to_json(t)::text, %s) > 0',
                    (needle,)).fetchone()[0]
                if found:
                    hits.append((schema, table, needle[:20]))
    return hits


def test_forget_leaves_nothing_behind(caller, postgres):
    text = "The launch code of the staging cluster is in vault path kv/staging-7791."
    entry = caller.post("/v1/entries", json={"kind": "fact", "text": text, "source": "chat"}).json()
    caller.patch(f"/v1/entries/{entry['id']}", json={"source": "corrected chat"})
    with psycopg.connect(postgres.admin_dsn) as conn:
        vector = conn.execute("SELECT embedding::text FROM memory.entries WHERE id = %s", (entry["id"],)).fetchone()[0]
    needles = [text, vector, entry["id"]]
    assert scan(postgres.admin_dsn, needles)  # the scan finds it while it is kept

    assert caller.delete(f"/v1/entries/{entry['id']}").status_code == 204
    assert scan(postgres.admin_dsn, needles) == []
