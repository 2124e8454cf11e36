"""The store and its derivations: the schema, the writers (ingest, record, merge, forget) and the derived tables."""
