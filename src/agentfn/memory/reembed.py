"""Move every entry to the configured embedding model: `python -m agentfn.memory.reembed`.

Run it after changing `AGENTFN_EMBEDDING_MODEL`; until an entry is moved, recall does not see it
(vectors of two models are never compared). Subjects are listed with `AGENTFN_ADMIN_DATABASE_URL`
(a role that may read across subjects, e.g. the database owner); every entry is then rewritten one
subject at a time through memory's own role, under the same row-level security as the doors.
"""

from __future__ import annotations

import argparse
import os
import sys

import psycopg

from . import embedder as embedding
from .memory import Memory
from .settings import ReembedSettings
from .store import Store

STALE_SUBJECTS = "SELECT DISTINCT subject FROM memory.entries WHERE model <> %s ORDER BY subject"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentfn.memory.reembed", description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64, help="entries embedded per batch")
    args = parser.parse_args(argv)
    settings = ReembedSettings.from_env()
    model = embedding.open_embedder(embedding.config_from_env(os.environ))
    store = Store(settings.database_url, pool_size=1)
    try:
        memory = Memory(store, model, max_tokens=0)
        with psycopg.connect(settings.admin_database_url) as admin:
            subjects = [row[0] for row in admin.execute(STALE_SUBJECTS, (model.config.name,))]
        moved = sum(memory.reembed(subject, args.batch) for subject in subjects)
    finally:
        store.close()
    print(f"moved {moved} entries of {len(subjects)} subjects to {model.config.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
