"""The stand-in's hand-written kernels: only their path matters, as the
source location their IR carries (the same in every cell, as an installed
flag_gems/ops/*.py is)."""
