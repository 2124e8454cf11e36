"""zlstore: an embedded SQLite results store for A/B compiler-switch benchmarks.

    from zlstore import Store
    store = Store("zlstore.db")
    summary = store.ingest("runs/")
    store.db["verdicts"].rows   # store.db is a sqlite_utils.Database
"""

from .store import Store, default_db_path

__all__ = ["Store", "default_db_path"]
