"""Which stored root a root is, wherever it is seen, and a root's life in
the store: moved, set aside, forgotten.

A root is known by what it is (layout.root_identity: its directory name and
its env file), not by where it is, and a cell by its path inside its root
(cells.relpath). A row still keeps the absolute path its root and cells were
last seen at: a re-ingest finds the stored cells under a directory by path
(unchanged.py) for a few stat() calls each. So a root seen at another path
(moved, copied, another mount point or host) is moved in the store, its
cells' paths with it; the next ingest of the tree where it was before moves
it back. The identity is not unique: a store made before release 6 may hold
one root twice (a tree ingested, moved and ingested again); `zlstore forget`
removes the copy that is not wanted. Likewise two stored cells that claim
one side of a round (a cell directory copied beside itself): each ingest
names them (claimed_twice) until `zlstore forget CELL` removes the copy."""

import json
import os
import sqlite3
from pathlib import Path
from typing import List, Optional, Tuple

from . import derive, floors, journal, macros
from ..read import layout, unchanged
from .. import names, output

# A root whose path another root of its name holds (a different root of that
# name was ingested there since, or merged from a store where it was there)
# keeps its rows under PATH + AWAY + the start of its identity: a path no
# walk meets, until an ingest finds the root on disk again.
AWAY = "#"


# A root that only a merged store named: where the source says its tree is
# is another host's word, so it is kept at MERGED + its identity, a path no
# walk meets and nothing writes into, until an ingest on this host finds the
# tree (by identity) and moves the root there (docs/security.md).
MERGED = "merged:"


def merged_path(conn: sqlite3.Connection, identity: Optional[str]) -> str:
    """A free path for a root merged from another store (see MERGED)."""
    candidate = f"{MERGED}{identity or 'unknown'}"
    n = 1
    while conn.execute("SELECT 1 FROM roots WHERE path = ?", (candidate,)).fetchone() is not None:
        n += 1
        candidate = f"{MERGED}{identity or 'unknown'}.{n}"
    return candidate


def path_text(path: Optional[str]) -> Optional[str]:
    """A stored root's path as people read it: a merged root's (MERGED) says
    what it is and how it gets a path on this host."""
    if path is None or not path.startswith(MERGED):
        return path
    return (
        f"{path} (merged: known here only from a merged store, whose tree is on another host; "
        f"{output.command('ingest', 'DIR')} of its tree on this host moves the root to DIR)"
    )


def known_here(path: str) -> bool:
    """Whether a stored root's path is one an ingest recorded (not a merged
    root's): the only kind anything may write into."""
    return os.path.isabs(path) and not path.startswith(MERGED)


def stored_at(conn: sqlite3.Connection, path: str) -> Optional[Tuple[int, str, str]]:
    """(id, identity, files_sig) of the root stored at path."""
    return conn.execute("SELECT id, identity, files_sig FROM roots WHERE path = ?", (path,)).fetchone()


def with_identity(conn: sqlite3.Connection, identity: str, path: str = "") -> List[Tuple[int, str]]:
    """(id, path) of every stored root with that identity: the one at path
    first, then the most recently ingested."""
    return conn.execute(
        "SELECT id, path FROM roots WHERE identity = ? ORDER BY path = ? DESC, ingested_at DESC, id DESC",
        (identity, path),
    ).fetchall()


def namesakes(conn: sqlite3.Connection, name: str, identity: str) -> List[Tuple[str, Optional[str], Optional[str]]]:
    """(path, env_file, env) of the stored roots named name that are other roots."""
    return conn.execute(
        "SELECT path, env_file, env FROM roots WHERE name = ? AND identity IS NOT ? ORDER BY id", (name, identity)
    ).fetchall()


def differing_keys(env: dict, stored_env: Optional[str]) -> List[str]:
    """The env file keys whose values differ between env and a stored roots.env."""
    try:
        other = json.loads(stored_env) if stored_env else {}
    except ValueError:
        other = {}
    other = other if isinstance(other, dict) else {}
    return sorted(k for k in set(env) | set(other) if env.get(k) != other.get(k))


def namesake_message(name: str, env_file: Optional[str], env: dict, others) -> str:
    """A problem's text: a root stored apart from the other roots of its name."""
    where = []
    for path, other_file, other_env in others:
        if env_file is None or other_file is None:
            why = "one of them has no root.env or campaign.env"
        elif other_file != env_file:
            why = f"one has {env_file}, the other {other_file}"
        else:
            keys = differing_keys(env, other_env)
            why = f"their {env_file} differ in {', '.join(keys[:6]) or 'content'}"
        where.append(f"{path} ({why})")
    return (
        f"another root named {name} is stored, from {'; '.join(where)}: this one is kept apart as a "
        f"root of its own; name each by its path"
    )


def relocate(conn: sqlite3.Connection, root_id: int, path: str) -> str:
    """Move a root and its cells to path in the store; returns where it was."""
    old = conn.execute("SELECT path FROM roots WHERE id = ?", (root_id,)).fetchone()[0]
    if old != path:
        conn.execute("UPDATE roots SET path = ? WHERE id = ?", (path, root_id))
        conn.execute("UPDATE cells SET path = ? || relpath WHERE root_id = ?", (path.rstrip("/") + "/", root_id))
    return old


def away_path(conn: sqlite3.Connection, path: str, identity: str) -> str:
    """A free path for a root set aside from path (see AWAY)."""
    for length in range(12, len(identity) + 1, 4):
        candidate = f"{path}{AWAY}{identity[:length]}"
        if conn.execute("SELECT 1 FROM roots WHERE path = ?", (candidate,)).fetchone() is None:
            return candidate
    n = 2
    while conn.execute("SELECT 1 FROM roots WHERE path = ?", (f"{path}{AWAY}{identity}.{n}",)).fetchone():
        n += 1
    return f"{path}{AWAY}{identity}.{n}"


def set_aside(conn: sqlite3.Connection, path: str) -> Optional[str]:
    """Move whatever root is stored at path out of its way; returns where to."""
    row = stored_at(conn, path)
    if row is None:
        return None
    away = away_path(conn, path, row[1] or "")
    relocate(conn, row[0], away)
    return away


# What forget() counts, in the order a summary prints them.
FORGOTTEN = (
    "cells",
    "measurements",
    "kernels",
    "fingerprints",
    "recorded_verdicts",
    "partitions",
    "ir_texts",
    "walked_dirs",
)


def forget(conn: sqlite3.Connection, root_id: int) -> dict:
    """Delete a root and everything derived from it: its cells with their
    rows, kernels and fingerprints, its recorded verdicts and plan, its
    pairs and ranges (the noise floors its pairs fed are recomputed), the
    directory listings kept under its path, and the stored texts no other
    cell names. Call it inside a write transaction: all or nothing. The
    ingest log (ingest_runs, ingest_problems) is history and stays."""
    path, kind = conn.execute("SELECT path, kind FROM roots WHERE id = ?", (root_id,)).fetchone()
    cells = "SELECT id FROM cells WHERE root_id = ?"
    counts = _cell_counts(conn, cells, root_id)
    counts["recorded_verdicts"] = conn.execute(
        "SELECT count(*) FROM recorded_verdicts WHERE root_id = ?", (root_id,)
    ).fetchone()[0]
    counts["partitions"] = conn.execute("SELECT count(*) FROM partitions WHERE root_id = ?", (root_id,)).fetchone()[0]
    _note_texts(conn, cells, root_id)
    for table in ("ab_slot_rows", "ab_range_rows", "ab_round_ranges", "ab_duplicate_rounds"):
        conn.execute(f"DELETE FROM {table} WHERE root_id = ?", (root_id,))
    conn.execute("DELETE FROM cells WHERE root_id = ?", (root_id,))  # rows, kernels, fingerprints cascade
    for table in ("ab_stale_rounds", "ab_stale_ranges"):  # nothing of it left to pair or judge
        conn.execute(f"DELETE FROM {table} WHERE root_id = ?", (root_id,))
    conn.execute("DELETE FROM roots WHERE id = ?", (root_id,))  # recorded verdicts and partitions cascade
    counts["walked_dirs"] = conn.execute(
        f"DELETE FROM walked_dirs WHERE {unchanged.AT_OR_UNDER}", unchanged.at_or_under(path)
    ).rowcount
    return _forgotten(conn, counts, fed_floors=kind == "screen")


def forget_cells(conn: sqlite3.Connection, cell_ids: List[int]) -> dict:
    """Delete these cells with their rows, kernels and fingerprints, and the
    stored texts no other cell names: copies (names.DUPLICATE), a cell or a
    copied directory of them. Their rounds are paired again (the triggers
    mark them), once for all of them, and the noise floors screening cells
    fed are recomputed. Call it inside a write transaction. Their root, and
    their files on disk, stay: ingesting the tree again stores them again."""
    cells, ids = "SELECT value FROM json_each(?)", json.dumps(cell_ids)
    screen = conn.execute(
        f"SELECT 1 FROM cells JOIN roots ON roots.id = cells.root_id "
        f"WHERE cells.id IN ({cells}) AND roots.kind = 'screen' LIMIT 1",
        (ids,),
    ).fetchone()
    counts = _cell_counts(conn, cells, ids)
    _note_texts(conn, cells, ids)
    conn.execute(f"DELETE FROM cells WHERE id IN ({cells})", (ids,))  # rows, kernels, fingerprints cascade
    return _forgotten(conn, counts, fed_floors=screen is not None)


def _forgotten(conn: sqlite3.Connection, counts: dict, fed_floors: bool) -> dict:
    """After cells are deleted: the texts they alone used go (counted in
    counts), the noise floors are recomputed where they were screening cells
    (their NO_IR_DIFF pairs fed the floors), and their rounds are paired
    again. Returns counts."""
    counts["ir_texts"] = _drop_unused_texts(conn)
    if fed_floors:
        floors.mark_every(conn)
    derive.derive(conn)
    return counts


def _cell_counts(conn: sqlite3.Connection, cells: str, param) -> dict:
    """How many cells (of the query cells, one parameter) and rows, kernels and
    fingerprints of theirs there are."""
    counts = {"cells": conn.execute(f"SELECT count(*) FROM cells WHERE id IN ({cells})", (param,)).fetchone()[0]}
    for name, table in (("measurements", "measurements"), ("kernels", "kernels"), ("fingerprints", "fingerprints")):
        counts[name] = conn.execute(f"SELECT count(*) FROM {table} WHERE cell_id IN ({cells})", (param,)).fetchone()[0]
    return counts


def _note_texts(conn: sqlite3.Connection, cells: str, param):
    """Note the stored texts the cells (a query, one parameter) name, before they go."""
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS forget_blobs (hash TEXT PRIMARY KEY) WITHOUT ROWID")
    conn.execute("DELETE FROM temp.forget_blobs")
    conn.execute(
        f"""INSERT OR IGNORE INTO temp.forget_blobs
                     SELECT ir_hash FROM kernels WHERE cell_id IN ({cells})
                     UNION SELECT index_hash FROM cells WHERE id IN ({cells}) AND index_hash IS NOT NULL""",
        (param, param),
    )


def _drop_unused_texts(conn: sqlite3.Connection) -> int:
    """Delete the noted texts no cell names any longer, and the digests of
    the noted ones under rules no cell using them is fingerprinted under.
    Returns how many IR texts went."""
    unreferenced = """SELECT hash FROM temp.forget_blobs
                      WHERE hash NOT IN (SELECT ir_hash FROM kernels)
                        AND hash NOT IN (SELECT index_hash FROM cells WHERE index_hash IS NOT NULL)"""
    conn.execute(f"DELETE FROM ir_digests WHERE ir_hash IN ({unreferenced})")
    # A text still used keeps its digests only under the rules a cell using
    # it is fingerprinted under: a screening root's cells have every rule,
    # a campaign's not (fingerprints.cell_rules).
    conn.execute("""DELETE FROM ir_digests WHERE ir_hash IN (SELECT hash FROM temp.forget_blobs)
                    AND NOT EXISTS (SELECT 1 FROM kernels k JOIN fingerprints f ON f.cell_id = k.cell_id
                                    WHERE k.ir_hash = ir_digests.ir_hash AND f.rule = ir_digests.rule)""")
    gone = conn.execute(f"SELECT count(*) FROM blobs WHERE kind = 'ttgir' AND hash IN ({unreferenced})").fetchone()[0]
    conn.execute(f"DELETE FROM blobs WHERE hash IN ({unreferenced})")
    conn.execute("DELETE FROM temp.forget_blobs")
    return gone


_CELL_COLUMNS = ("id", "relpath", "path", "op", "dtype", "side", "round", "card", "repeat_dir")
# The cells that claim a side of a round: the round key's values, then the side, as parameters.
_CLAIMANTS = macros.statement(
    "roots.claimants",
    f"SELECT {', '.join(f'c.{name}' for name in _CELL_COLUMNS)} FROM [[side_cells ? round: ?]] ORDER BY c.id",
)


def claimed_twice(
    conn: sqlite3.Connection, root_ids: Optional[List[int]] = None, under: Optional[List[str]] = None
) -> List[Tuple[str, layout.Problem]]:
    """The sides of a round that more than one current cell claims, or
    whose cell's files another cell holds (view duplicate_cells), of these
    roots (None: every root), as (root name, problem): each names the cell
    most likely the copy (_likely_copy), the others, and how to forget the
    copy. A set of copies is named once, not from each round it is in.
    under: only the sets with a cell at or under one of these paths (what a
    `record` of one cell covers)."""
    where = "" if root_ids is None else f"WHERE root_id IN ({', '.join('?' * len(root_ids))})"
    columns = ", ".join(f"c.{name}" for name in _CELL_COLUMNS)
    # The view's round key columns: names.ROUND_KEY's, a cell's op and dtype as op and dtype.
    view_names = [{"cell_op": "op", "cell_dtype": "dtype"}.get(column.name, column.name) for column in names.ROUND_KEY]
    key = ", ".join(view_names)
    problems, named = [], set()
    for root, side, claims, latest, *round_key in conn.execute(
        f"SELECT root, side, claims, latest_cell_id, {key} FROM duplicate_cells {where} "
        "ORDER BY root, op, dtype, round, card, side",
        root_ids or (),
    ).fetchall():
        said = dict(zip(view_names, round_key))
        card, op, dtype, round_ = said["card"], said["op"], said["dtype"], said["round"]
        # The cells one by one, not the view's lines: a path may hold a newline.
        if claims > 1:
            cells = conn.execute(_CLAIMANTS, (*round_key, side)).fetchall()
            what = f"{claims} stored cells claim the {side} side of {op} {dtype or '(no dtype)'}, round {round_}" + (
                f" on card {card}" if card is not None else ""
            )
        else:
            cells = conn.execute(
                f"SELECT {columns} FROM cells c WHERE id = ? UNION ALL "
                f"SELECT {columns} FROM cell_copies k JOIN cells c ON c.id = k.copy_id WHERE k.cell_id = ?",
                (latest, latest),
            ).fetchall()
            cells.sort()
            what = f"{len(cells)} stored cells hold the same files (run.log and all), each counted in its own round"
        if frozenset(cells) in named or (
            under is not None and not any(unchanged.is_at_or_under(cell[2], top) for cell in cells for top in under)
        ):
            continue
        named.add(frozenset(cells))
        copy = _likely_copy(cells)
        gone = {cell[2] for cell in cells if not os.path.lexists(cell[2])}
        also = ", ".join(
            cell[1] + (" (gone from disk)" if cell[2] in gone else "") for cell in cells if cell is not copy
        )
        problems.append(
            (
                root,
                layout.Problem(
                    copy[2],
                    None,
                    (
                        f"{what} (also: {also}){' (gone from disk)' if copy[2] in gone else ''}; no row of those rounds "
                        f"pairs, none is judged ({names.DUPLICATE}). Forget the copy: {output.command('forget', copy[2])}"
                    ),
                ),
            )
        )
    return problems


def missing_sides(conn: sqlite3.Connection, root_ids: Optional[List[int]] = None) -> List[Tuple[str, layout.Problem]]:
    """The screening pairs of these roots (None: every root) with a cell on
    one side only (view missing_sides), as (root name, problem) naming the
    cell that is there and the side that is not: such a pair is NO_ROWS
    for that, not for its dtype."""
    where = "" if root_ids is None else f" WHERE root_id IN ({', '.join('?' * len(root_ids))})"
    problems = []
    for root, op, dtype, missing, present in conn.execute(
        f"SELECT root, op, dtype, missing, present_cell FROM missing_sides{where} ORDER BY root, op, dtype",
        root_ids or (),
    ).fetchall():
        there = "after" if missing == "before" else "before"
        problems.append(
            (
                root,
                layout.Problem(
                    present,
                    None,
                    (
                        f"{names.MISSING_SIDE}: {op} {dtype or '(no dtype)'} has a cell on the {there} side and none on the {missing} side stored "
                        f"(the run stopped before it, or its directory is gone or was not ingested): the pair is NO_ROWS "
                        f"for that, not for its dtype"
                    ),
                ),
            )
        )
    return problems


def _state(summary: Optional[str]) -> Optional[str]:
    try:
        found = json.loads(summary) if summary else None
    except ValueError:
        return None
    return found.get("state") if isinstance(found, dict) else None


def half_ingested(conn: sqlite3.Connection, root_ids: Optional[List[int]] = None) -> List[Tuple[str, layout.Problem]]:
    """The roots (of root_ids; None: every root) an ingest run was killed in
    (kill -9, a lost node: journal.killed) before it finished, and that no later
    ingest of the same path (or one above it) has completed: some of their
    cells may be missing, and their pairs NO_ROWS for that. As (root name,
    problem) naming the run, the path it was given and the command that
    completes it; a path of which nothing was stored yet is named with the
    root ''. Read from the run log: it holds until that ingest runs."""
    runs = conn.execute(
        "SELECT id, started_at, paths, summary, finished_at IS NOT NULL FROM ingest_runs "
        "WHERE command = 'ingest' ORDER BY id"
    ).fetchall()
    completed: List[Tuple[int, List[str]]] = []
    cut: List[Tuple[int, str, List[str]]] = []
    for run_id, started_at, paths, summary, finished in runs:
        try:
            given = [p for p in json.loads(paths or "[]") if isinstance(p, str)]
        except ValueError:
            continue
        if journal.killed(summary, bool(finished)):
            cut.append((run_id, started_at, given))
        elif finished and _state(summary) == "complete":
            completed.append((run_id, given))
    problems: List[Tuple[str, layout.Problem]] = []
    for run_id, started_at, given in cut:
        for path in given:
            if any(
                later > run_id and any(unchanged.is_at_or_under(path, top) for top in tops) for later, tops in completed
            ):
                continue
            message = (
                f"half-ingested: ingest run {run_id} (started {started_at}) of {path} was killed before it "
                f"finished: cells under it may be missing (their pairs NO_ROWS); run {output.command('ingest', path)} "
                "to complete it"
            )
            found = [
                (root_id, name)
                for root_id, name, root_path in conn.execute("SELECT id, name, path FROM roots ORDER BY name")
                if unchanged.is_at_or_under(root_path, path) or unchanged.is_at_or_under(path, root_path)
            ]
            if root_ids is not None:
                found = [(root_id, name) for root_id, name in found if root_id in root_ids]
            elif not found:
                found = [(None, "")]
            problems.extend((name, layout.Problem(path, None, message)) for _, name in found)
    return problems


def _likely_copy(cells: List[tuple]) -> tuple:
    """Of the cells (id, relpath, path, op, dtype, side, round, card,
    repeat_dir) that claim one side of a round, the one to forget: one gone
    from disk, else one whose path inside its root does not give what it
    claims (`X_after.bak`, `bak/X_after`, `r4/` saying ROUND=1: a copy
    beside the cell that is in its place), else one whose name leaves out a
    dtype the other's gives (`abs_before` beside `abs_float16_before`), else
    the one stored last. Which was stored last alone does not tell: a copy
    that sorts first is stored first, and the original is stored again
    whenever its files change."""

    def in_its_place(cell) -> int:
        """0: out of its place; 1: in it, by a name without its dtype; 2: in it."""
        said, no_dtype = layout.path_claims(layout.RootRef(Path(), "", tuple(cell[1].split("/"))))
        rank = 1 if no_dtype else 2
        claimed = dict(zip(("op", "dtype", "side", "round", "card", "repeat_dir"), cell[3:]))
        placed = {"op", "side", "round"} <= said.keys() and all(said[k] == claimed[k] for k in said)
        return rank if placed else 0

    return max(cells, key=lambda cell: (not os.path.lexists(cell[2]), -in_its_place(cell), cell[0]))


# What `zlstore roots` prints for people, in this order (every column of
# the view store_roots is in --json and the other formats).
HELD_COLUMNS = ("root", "kind", "switch", "values", "started_at", "environment", "cells", "open_problems")


def held(conn: sqlite3.Connection) -> List[dict]:
    """What the store holds: one row per root (the view store_roots), the
    newest first; environment as a dict (field -> its values)."""
    cursor = conn.execute("SELECT * FROM store_roots ORDER BY started_at DESC, root, root_id")
    columns = [d[0] for d in cursor.description]
    rows = [dict(zip(columns, row)) for row in cursor]
    for row in rows:
        row["environment"] = json.loads(row["environment"]) if row["environment"] else {}
    return rows


def held_shown(rows: List[dict]) -> List[dict]:
    """The rows as the table shows them: the switch's values before -> after,
    and the environment as field=value words (unknown: its cells recorded none)."""
    return [
        {
            **row,
            "values": f"{row['switch_before'] or '?'} -> {row['switch_after'] or '?'}"
            if row["switch_before"] or row["switch_after"]
            else "",
            "environment": ", ".join(
                f"{field}={'|'.join(map(str, values))}" for field, values in row["environment"].items()
            )
            or "unknown",
        }
        for row in rows
    ]


def held_table(rows: List[dict]) -> str:
    """`zlstore roots` for people: a table, then a count."""
    if not rows:
        return "(no roots: zlstore ingest RUNS fills the store)"
    problems = sum(row["open_problems"] for row in rows)
    counts = f"{len(rows)} roots, {sum(row['cells'] for row in rows)} current cells, {problems} open problem"
    return output.table(held_shown(rows), HELD_COLUMNS) + f"\n\n{counts}{'' if problems == 1 else 's'}"
