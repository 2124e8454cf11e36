"""Which rules a cell is fingerprinted under, and the fingerprints a store
lacks under a rule, computed from the IR it holds.

An ingest fingerprints each cell under a few rules as it parses it
(ingest_rules, cell_rules); any other rule is computed here when it is
first asked for (Store.compute_fingerprints), from the stored IR, never
from the runs/ tree: each distinct text digested once, in worker processes
where there are many, and each distinct set of kernels combined once."""

import contextlib
import sqlite3
from typing import Iterator, List, Optional, Tuple

from .. import db, forked
from ..read import parse, ttgir
from ..read.parallel import worker_count
from ..read.parse import unpacked

_reader = None  # in a rescore worker: (database path, its own read-only connection)

# Texts per rescore job: few enough jobs that sending them costs little, small
# enough that two workers finish together.
RESCORE_JOB_TEXTS = 128


def ingest_rules(conn: sqlite3.Connection) -> tuple:
    """The rules an ingest fingerprints a repeat run's or campaign's cells
    under: the current rule and the rules that change no text. Any other rule
    is computed from the stored IR when it is first asked for
    (Store.compute_fingerprints), so a costly rule nobody uses (v4 strips
    every location) is not paid for on every round of a campaign. A
    screening cell gets every rule (SCREENING_RULES): the verdicts compare
    rules, and the strictest tells whether the axis is live."""
    row = conn.execute("SELECT current_rule FROM judging_settings").fetchone()
    current = row[0] if row else ttgir.DEFAULT_RULE
    return tuple(rule for name, rule in ttgir.RULES.items() if name == current or rule.triggers == ())


def cell_rules(conn: sqlite3.Connection, root_kind: str) -> tuple:
    """The rules an ingest fingerprints a cell of a root of root_kind under."""
    return parse.SCREENING_RULES if root_kind == "screen" else ingest_rules(conn)


def lacking(
    conn: sqlite3.Connection, path: str, rule: ttgir.Rule, batch: int, root_kind: Optional[str] = None
) -> Tuple[dict, list]:
    """What the store at path (open on conn) lacks under rule, computed:
    the digests of its texts not yet stored ({hash: digest}) and the
    (cell id, rule, fingerprint) of every cell (of roots of root_kind only,
    where given) without one. Each distinct IR text is digested once, from
    its stored bytes (ttgir.raw_digest), or not read at all where its stored
    markers say the rule leaves it as it is; cells with the same kernels
    share one combine. Writes nothing."""
    kernels = (
        "kernels"
        if root_kind is None
        else (
            "kernels WHERE cell_id IN (SELECT cells.id FROM cells JOIN roots ON roots.id = cells.root_id"
            " WHERE roots.kind = :kind)"
        )
    )
    # Each distinct text looked up once, not once per kernel; a text the
    # rule leaves as it is (its stored markers say it holds none of the
    # rule's triggers) is its own digest, told without reading it.
    missing = conn.execute(
        f"""SELECT k.ir_hash, {_leaves_sql(rule)} FROM (SELECT DISTINCT ir_hash FROM {kernels}) k
            LEFT JOIN blobs b ON b.hash = k.ir_hash
            WHERE NOT EXISTS (SELECT 1 FROM ir_digests d WHERE d.ir_hash = k.ir_hash AND d.rule = :rule)""",
        {"rule": rule.name, "kind": root_kind},
    ).fetchall()
    missing_texts = [h for h, left in missing if not left]
    left_alone = [(h, h) for h, left in missing if left]
    new: dict = dict(left_alone)
    with digesting(conn, path, rule, missing_texts, batch) as found:
        # while the workers digest: the cells, and what they need that is stored
        combiner = Combiner(rule, cells_lacking(conn, rule, root_kind))
        combiner.add(left_alone)
        combiner.add(stored_digests(conn, rule, combiner.waited().difference(missing_texts), batch))
        for part in found:
            new.update(part)
            combiner.add(part)
    late = late_digests(conn, rule, combiner.waited(), batch)
    new.update(late)
    combiner.add(late)
    return new, combiner.rows()


@contextlib.contextmanager
def digesting(
    conn: sqlite3.Connection, path: str, rule: ttgir.Rule, hashes: list, batch: int
) -> Iterator[Iterator[List[Tuple[str, str]]]]:
    """Yields an iterator of [(hash, digest)] lists for the stored texts
    hashes. Digesting is the work: with many texts, worker processes read
    and digest them (each opening the store at path itself), started before
    this yields so that this process can do its own part meanwhile."""
    workers = worker_count(len(hashes) // 8)
    if not workers:
        yield (_digest_rows(rule.name, _read_blobs(conn, hashes[i : i + batch])) for i in range(0, len(hashes), batch))
        return
    jobs = [(path, rule.name, hashes[i : i + RESCORE_JOB_TEXTS]) for i in range(0, len(hashes), RESCORE_JOB_TEXTS)]
    with forked.Workers(workers, lambda me: map(_text_digests, jobs[me::workers])) as digests:
        yield digests.as_ready()


def cells_lacking(conn: sqlite3.Connection, rule: ttgir.Rule, root_kind: Optional[str] = None) -> list:
    """(cell id, index hash, kernels key) of every cell (of roots of
    root_kind, where given) without a fingerprint under rule, by id: one
    query, one string per cell spelling its (kernel name, IR hash) pairs
    (_kernels reads it back), so that this process reads only the
    distinct ones into objects."""
    of_kind = "" if root_kind is None else " AND cells.root_id IN (SELECT id FROM roots WHERE kind = :kind)"
    cells = conn.execute(
        f"""SELECT id, {"index_hash" if rule.hashes_index else "NULL"},
                   (SELECT group_concat({_KERNEL_KEY}, ',') FROM kernels k WHERE k.cell_id = cells.id)
            FROM cells
            WHERE NOT EXISTS (SELECT 1 FROM fingerprints f WHERE f.cell_id = cells.id AND f.rule = :rule)
            {of_kind}""",
        {"rule": rule.name, "kind": root_kind},
    ).fetchall()
    cells.sort()  # here: ORDER BY would make SQLite read the wide cells table instead of an index
    return cells


def stored_digests(conn: sqlite3.Connection, rule: ttgir.Rule, hashes, batch: int) -> list:
    """(hash, digest) under rule that the store holds of hashes."""
    hashes = list(hashes)
    found: List[Tuple[str, str]] = []
    for i in range(0, len(hashes), batch):
        chunk = hashes[i : i + batch]
        found.extend(
            conn.execute(
                f"SELECT ir_hash, digest FROM ir_digests WHERE rule = ? AND ir_hash IN ({', '.join('?' * len(chunk))})",
                (rule.name, *chunk),
            )
        )
    return found


def late_digests(conn: sqlite3.Connection, rule: ttgir.Rule, hashes: set, batch: int) -> list:
    """(hash, digest) of texts digested neither by the workers nor
    before (a kernel stored since the missing texts were listed, a digest
    deleted meanwhile): digested here. Raises LookupError for a text the
    store does not hold: a fingerprint without it would be wrong."""
    ordered = sorted(hashes)
    found = [
        pair
        for i in range(0, len(ordered), batch)
        for pair in _digest_rows(rule.name, _read_blobs(conn, ordered[i : i + batch]))
    ]
    if len(found) < len(ordered):
        absent = sorted(set(hashes).difference(h for h, _ in found))
        raise LookupError(f"{len(absent)} IR texts that kernels name are not stored, e.g. {absent[0]}")
    return found


def _text_digests(job) -> list:
    """(hash, digest under rule) of stored IR texts; job: (database path,
    rule name, hashes). Run in a worker, which reads the texts itself."""
    global _reader
    path, rule, hashes = job
    if _reader is None or _reader[0] != path:
        _reader = (path, sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=db.BUSY_TIMEOUT_MS / 1000))
    return _digest_rows(rule, _read_blobs(_reader[1], hashes))


def _read_blobs(conn, hashes) -> list:
    marks = ", ".join("?" * len(hashes))
    return conn.execute(f"SELECT hash, size, data FROM blobs WHERE hash IN ({marks})", hashes).fetchall()


def _digest_rows(rule: str, rows) -> list:
    """(hash, digest) of (hash, size, zlib data) rows: from the stored bytes,
    which a rule's normalize_raw mostly need not decode (ttgir.raw_digest)."""
    r = ttgir.get_rule(rule)
    return [(h, ttgir.raw_digest(r, unpacked(data, size, f"blob {h}"), h)) for h, size, data in rows]


def _leaves_sql(rule: ttgir.Rule) -> str:
    """An SQL test on a blobs row b: whether the rule leaves its text as it
    is (Rule.leaves), from the markers stored with it; false where unknown."""
    if rule.triggers is None:
        return "0"
    if not rule.triggers:
        return "1"
    return " AND ".join(f"""coalesce(json_extract(b.markers, '$."{t}"') = 0, 0)""" for t in rule.triggers)


# A cell's kernels as one string: hex of each name and IR hash (any bytes,
# NUL included), "/" between them, "," between kernels: never ambiguous.
_KERNEL_KEY = "hex(k.name) || '/' || hex(k.ir_hash)"


def _kernels(key: Optional[str]) -> list:
    """The (kernel name, IR hash) pairs a kernels key spells (None: none)."""
    if key is None:
        return []
    return [tuple(bytes.fromhex(part).decode("utf-8") for part in kernel.split("/")) for kernel in key.split(",")]


class Combiner:
    """The fingerprints of cells lacking one, each distinct set of kernels
    (every round of a campaign compiles the same IR) combined once, as soon
    as the digests of its texts are in: while the workers still digest."""

    def __init__(self, rule: ttgir.Rule, cells: list):
        self.rule = rule
        # (cell id, key): a key is the index.tsv hash where the rule hashes
        # it, and the cell's kernels key
        self.keys = [
            (cell_id, (index_hash if rule.hashes_index else None, kernels)) for cell_id, index_hash, kernels in cells
        ]
        self.kernels: dict = {}  # key -> (kernel name, IR hash) pairs
        self.digests: dict = {}
        self.done: dict = {}  # key -> fingerprint
        self.unknown: dict = {}  # key -> how many of its texts lack a digest
        self.waiting: dict = {}  # text -> the keys that lack its digest
        for key in {key for _, key in self.keys}:
            self.kernels[key] = _kernels(key[1])
            texts = {h for _, h in self.kernels[key]}
            if texts:
                self.unknown[key] = len(texts)
                for h in texts:
                    self.waiting.setdefault(h, []).append(key)
            else:
                self._settle(key)

    def _settle(self, key):
        self.done[key] = ttgir.fingerprint(self.rule, self.kernels[key], self.digests.__getitem__, key[0])

    def waited(self) -> set:
        """The texts some kernel set still lacks the digest of."""
        return set(self.waiting)

    def add(self, digests):
        """Take (text hash, digest) pairs; combine what they complete."""
        for h, digest in digests:
            self.digests[h] = digest
            for key in self.waiting.pop(h, ()):
                self.unknown[key] -= 1
                if not self.unknown[key]:
                    self._settle(key)

    def rows(self) -> list:
        """(cell id, rule, fingerprint) of every cell, in the cells' order."""
        return [(cell_id, self.rule.name, self.done[key]) for cell_id, key in self.keys]
