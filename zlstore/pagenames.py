"""The names a served store's links are made of, apart from datasette: a
writer sums up a finding's IR change with its kernel_diff link
(irchanges.py) without importing datasette, which takes most of a second."""

# The store is always served under this name, whatever its file is called, so
# that links to a view or a canned query (/zlstore/verdicts) can be shared.
DB_NAME = "zlstore"

# The canned query that shows one pair's kernels (datasette_plugin.py).
KERNEL_DIFF = "kernel_diff"
