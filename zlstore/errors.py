"""The errors a store raises for a database file it cannot use: a leaf, so
that db.py (connections), macros.py and migrations.py all raise the same
classes. Callers catch them as db.StoreError and db.SchemaError."""


class StoreError(Exception):
    """A database file zlstore cannot use as asked. The message names the
    file and the fault; the file is left as it was."""


class SchemaError(StoreError):
    """The database cannot be used by this release."""
