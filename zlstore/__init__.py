"""zlstore: an embedded SQLite results store for A/B compiler-switch benchmarks.

from zlstore import Store
store = Store("zlstore.db")
summary = store.ingest("runs/")
store.db["verdicts"].rows   # store.db is a sqlite_utils.Database
"""

__all__ = ["Store", "default_db_path"]


def __getattr__(name):
    """Store and default_db_path, imported when first asked for: `import
    zlstore` alone (the command line's first step) loads nothing, so that
    Ctrl-C during start-up is handled (zlstore/__main__.py)."""
    if name in __all__:
        from .store import store  # on first use: `import zlstore` alone loads nothing (above)
        from .show import irchanges  # noqa: F401 - its step of a final derivation (derive.FINAL_STEPS), as the CLI's

        return getattr(store, name)
    raise AttributeError(f"module 'zlstore' has no attribute {name!r}")
