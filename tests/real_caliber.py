"""The caliber the real FlagGems runs measured under: the root.env of the
H200 and H100 runs of 2026-12-05 under tests/data/real (cuda, core, no
CUDA graphs, an isolated tuner cache, one direct repeat, default shapes,
no FlagTune). The tests that stand in for such a run, or write a tree
beside the real ones, take it from here."""

REAL_CALIBER = {
    "ZL_BACKEND": "cuda",
    "BENCH_LEVEL": "core",
    "ZL_ENABLE_CUDAGRAPH": "0",
    "ZL_ISOLATE_TUNER_CACHE": "1",
    "ZL_DIRECT_REPEAT": "1",
    "SHAPE_MODE": "default",
    "USE_FLAGTUNE": "0",
}
