"""pytest plugins that `zlstore flaggems` loads into FlagGems' benchmark
(-p NAME, with this directory on PYTHONPATH). Each is one standalone file
that imports nothing of zlstore: the benchmark's Python need not have
zlstore installed."""
