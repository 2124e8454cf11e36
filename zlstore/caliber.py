"""The caliber: the seven measurement settings that must be equal before two
latencies may be compared. This tuple is the one definition; the schema, the
views and every output derive from it."""

from typing import Mapping, NamedTuple, Optional


class CaliberField(NamedTuple):
    name: str
    env: str


CALIBER_FIELDS = (
    CaliberField("backend", "ZL_BACKEND"),
    CaliberField("bench_level", "BENCH_LEVEL"),
    CaliberField("cudagraph", "ZL_ENABLE_CUDAGRAPH"),
    CaliberField("isolate_tuner_cache", "ZL_ISOLATE_TUNER_CACHE"),
    CaliberField("direct_repeat", "ZL_DIRECT_REPEAT"),
    CaliberField("shape_mode", "SHAPE_MODE"),
    CaliberField("flagtune", "USE_FLAGTUNE"),
)

NAMES = tuple(f.name for f in CALIBER_FIELDS)
ENV_VARS = tuple(f.env for f in CALIBER_FIELDS)


def from_env(env: Mapping[str, str]) -> dict:
    """The caliber values an environment (cell.env, root.env, os.environ) gives,
    keyed by field name; fields it does not give are absent, never guessed."""
    return {
        f.name: env[f.env].strip() for f in CALIBER_FIELDS if env.get(f.env) is not None and env[f.env].strip() != ""
    }


def complete(values: Mapping[str, str]) -> Optional[tuple]:
    """The caliber as a tuple in field order, or None when any field is unknown:
    an unknown caliber is stored and shown but never paired."""
    if all(values.get(name) not in (None, "") for name in NAMES):
        return tuple(values[name] for name in NAMES)
    return None


def missing(env: Mapping[str, str]) -> tuple:
    """The caliber fields an environment leaves unset, in field order: a run
    started without them would store every cell with an unknown caliber,
    never paired. Named before a run starts, not found afterwards."""
    return tuple(f for f in CALIBER_FIELDS if not (env.get(f.env) or "").strip())
