"""What a run writes where the harness would, shared by the screen, the
campaign's cards and the FlagGems runs: a cell's cell.env (RC last: a cell
with RC is finished), whole or not at all; the command template filled in;
timestamps; the defaults (CELL_TIMEOUT, the switch's two values); and a
problem outside any cell, in the ingest log."""

import datetime
import shlex
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .. import caliber, provenance
from ..read import files, layout

DEFAULT_CELL_TIMEOUT = 2400.0
DEFAULT_SWITCH_VALUES = ("0", "1")  # the switch off (before) and on (after)


def timestamp() -> str:
    return datetime.datetime.now().strftime("%Y%m%d_%H%M%S")


def local_now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def fill(template: str, values: Dict[str, object]) -> str:
    """The command template with {name} placeholders replaced by shell-quoted
    values (an empty dtype becomes ''); any other braces (${VAR}) stay."""
    text = template
    for name, value in values.items():
        text = text.replace("{" + name + "}", shlex.quote(str(value)))
    return text


def env_text(items: Sequence[Tuple[str, object]]) -> str:
    """KEY=VALUE lines; values with shell metacharacters are quoted."""
    lines = []
    for key, value in items:
        value = "" if value is None else str(value)
        safe = all(c.isalnum() or c in "_./:,+@%-" for c in value)
        lines.append(f"{key}={value if safe else shlex.quote(value)}\n")
    return "".join(lines)


def write_atomic(path: Path, text: str):
    """Write a file whole or not at all: a reader never sees half of it, and
    a link planted at its place or its temporary name redirects nothing."""
    files.replace_atomic(path, text.encode("utf-8"))


def caliber_items(env: Dict[str, str]) -> List[Tuple[str, str]]:
    """The caliber variables an environment sets, by zlstore.caliber's one list."""
    return [(f.env, env[f.env].strip()) for f in caliber.CALIBER_FIELDS if (env.get(f.env) or "").strip()]


def switch_values(text: str) -> Tuple[str, str]:
    """`before,after`: the switch's value on each side (real switches are not
    all 0/1: TRITON_F32_DEFAULT takes ieee, tf32, tf32x3). ValueError unless
    two different non-empty values."""
    values = tuple(v.strip() for v in text.split(","))
    if len(values) != 2 or not all(values) or values[0] == values[1]:
        raise ValueError(f"the switch values are two different values, before,after (e.g. ieee,tf32), not {text!r}")
    return values


def write_cell_env(
    out: Path,
    *,
    op: str,
    dtype: str,
    side: str,
    round_: int,
    card: int,
    started_at: str,
    switch: str,
    switch_value: str,
    cell_timeout: float,
    env: Dict[str, str],
    elapsed_s: float,
    rc: int,
    nodeid: Optional[str] = None,
    environment: Optional[Mapping[str, str]] = None,
):
    """A finished cell's cell.env, whole, RC last: a cell.env with RC says
    the cell is finished. The caliber variables are those env sets; the
    ENV_* keys what the cell ran on (provenance.py)."""
    items = [
        ("OP", op),
        ("DTYPE", dtype),
        ("SIDE", side),
        ("ROUND", round_),
        ("CARD", card),
        ("STARTED_AT", started_at),
    ] + ([("NODEID", nodeid)] if nodeid else [])
    items += [("SWITCH", switch), ("SWITCH_VALUE", switch_value), ("CELL_TIMEOUT", num(cell_timeout))]
    items += caliber_items(env)
    items += provenance.env_items(environment or {})
    items += [("ELAPSED_S", f"{elapsed_s:.3f}"), ("RC", rc)]
    write_atomic(Path(out) / layout.CELL_ENV, env_text(items))


def num(value: float) -> str:
    return format(value, "g")
