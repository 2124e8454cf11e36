-- zlstore: the one schema.
--
-- Tables hold what was read; views are the public interface (the CLI reads
-- them, datasette shows them). Tables may change between releases, views keep
-- their columns.
--
-- Two macros are expanded by zlstore/db.py before this file reaches SQLite,
-- so that the caliber fields and the verdict / reason names are defined once,
-- in zlstore/caliber.py and zlstore/judge.py:
--   "caliber: TEMPLATE" in double brackets: TEMPLATE once per caliber
--       field ({f} = the field name), joined with ", "
--   "caliber SEP: TEMPLATE": the same, joined with SEP
--   "verdict NAME" / "reason NAME": the quoted name; an unknown name is an
--       error when the schema is applied
--
-- Statements are separated by ";" at the end of a line. Section markers
-- ("-- @tables", "-- @views") tell db.py what is recreated on upgrade: views
-- are dropped and recreated whenever this file changes, tables only through
-- migrations.

-- @tables

-- Settings that change what the views say, e.g. the current fingerprint rule.
CREATE TABLE IF NOT EXISTS settings (
    key TEXT PRIMARY KEY,
    value TEXT
);

-- One row per distinct caliber: the seven settings that must all be equal
-- before two latencies may be compared.
CREATE TABLE IF NOT EXISTS calibers (
    id INTEGER PRIMARY KEY,
    [[caliber: {f} TEXT NOT NULL]],
    UNIQUE ([[caliber: {f}]])
);

-- A directory one screening, repeat run or campaign created.
CREATE TABLE IF NOT EXISTS roots (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,          -- absolute path when ingested
    name TEXT NOT NULL,                 -- its directory name, how users name it
    kind TEXT NOT NULL CHECK (kind IN ('screen', 'repeat', 'campaign')),
    switch TEXT,
    host TEXT,
    started_at TEXT,
    rounds INTEGER,                     -- campaign.env ROUNDS
    cards INTEGER,                      -- campaign.env CARDS
    screen_root TEXT,                   -- campaign.env SCREEN_ROOT
    caliber_id INTEGER REFERENCES calibers(id),  -- the root env file's caliber, when complete
    env_file TEXT,                      -- root.env / campaign.env / NULL
    env TEXT,                           -- that file as a JSON object
    files_sig TEXT,                     -- content signature of the root-level files
    ingested_at TEXT
);

-- One side of one op in one round on one card: one benchmark process.
-- Every inferred value records where it came from (*_source): cell.env,
-- path, root.env, campaign.env, screen.tsv or partition.tsv.
CREATE TABLE IF NOT EXISTS cells (
    id INTEGER PRIMARY KEY,
    root_id INTEGER NOT NULL REFERENCES roots(id) ON DELETE CASCADE,
    path TEXT NOT NULL UNIQUE,          -- absolute path of the cell directory
    relpath TEXT NOT NULL,              -- relative to its root
    repeat_dir TEXT,                    -- campaign: the card's repeat run directory
    card INTEGER,
    op TEXT,
    dtype TEXT,                         -- '' = the operator's default set; NULL = unknown
    side TEXT CHECK (side IN ('before', 'after')),
    round INTEGER,                      -- 0 in a screening root
    rc INTEGER,
    elapsed_s REAL,
    started_at TEXT,
    nodeid TEXT,
    switch TEXT,
    switch_value TEXT,
    cell_timeout REAL,
    caliber_id INTEGER REFERENCES calibers(id),  -- NULL: unknown, never paired
    caliber_missing TEXT,               -- the caliber fields nothing established
    card_source TEXT,
    op_source TEXT,
    dtype_source TEXT,
    side_source TEXT,
    round_source TEXT,
    rc_source TEXT,
    elapsed_source TEXT,
    caliber_source TEXT,                -- every source that gave a caliber field, '+'-joined
    provenance TEXT,                    -- JSON: value name -> source, for every value
    n_records INTEGER NOT NULL DEFAULT 0,
    n_rows INTEGER NOT NULL DEFAULT 0,
    n_counted INTEGER NOT NULL DEFAULT 0,
    n_kernels INTEGER NOT NULL DEFAULT 0,
    convert_layouts INTEGER NOT NULL DEFAULT 0,
    index_hash TEXT REFERENCES blobs(hash),  -- index.tsv bytes (fingerprint rule v1)
    n_problems INTEGER NOT NULL DEFAULT 0,
    stat_sig TEXT,                      -- names, sizes and mtimes: the cheap "unchanged" test
    content_sig TEXT,                   -- content hashes: the sure one
    ingested_at TEXT
);
CREATE INDEX IF NOT EXISTS cells_root ON cells(root_id, op, dtype, round, side);
CREATE INDEX IF NOT EXISTS cells_caliber ON cells(caliber_id);

-- Every element of every FlagGems result list in a cell's run.log.
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY,
    cell_id INTEGER NOT NULL REFERENCES cells(id) ON DELETE CASCADE,
    line INTEGER,                       -- run.log line of its [INFO] record
    record INTEGER,                     -- the record's position in the file
    idx INTEGER,                        -- the row's position in the record's result list
    op_name TEXT,                       -- the row's own operator (a cell may hold several)
    dtype TEXT,                         -- without the "torch." prefix
    mode TEXT,
    level TEXT,
    shape TEXT NOT NULL,                -- shape_detail as canonical JSON: the row's identity
    legacy_shape TEXT,                  -- JSON
    latency_base REAL,                  -- ms, torch
    latency REAL,                       -- ms, FlagGems: what an A/B compares
    speedup REAL,
    gbps_base REAL,
    gbps REAL,
    accuracy,
    tflops REAL,
    utilization REAL,
    compared_speedup REAL,
    error_msg TEXT,
    extra TEXT,                         -- JSON: fields this release does not know
    counted INTEGER NOT NULL,           -- 1: a measurement that may be compared
    not_counted_reason TEXT,
    fallback INTEGER NOT NULL DEFAULT 0 -- timed by the direct fallback (BENCHMARK_DIRECT_NO_CUDAGRAPH)
);
CREATE INDEX IF NOT EXISTS measurements_cell ON measurements(cell_id, op_name, dtype, shape);

-- Content stored once by hash, zlib-compressed: TTGIR texts (a campaign
-- repeats the same IR in every round) and index.tsv files.
CREATE TABLE IF NOT EXISTS blobs (
    hash TEXT PRIMARY KEY,              -- sha256 of the raw bytes
    kind TEXT NOT NULL,                 -- 'ttgir' or 'index.tsv'
    size INTEGER NOT NULL,
    data BLOB NOT NULL                  -- zlib
);

-- Every .ttgir a cell compiled.
CREATE TABLE IF NOT EXISTS kernels (
    id INTEGER PRIMARY KEY,
    cell_id INTEGER NOT NULL REFERENCES cells(id) ON DELETE CASCADE,
    name TEXT NOT NULL,                 -- file stem: part of the fingerprint
    cache_dir TEXT,                     -- never part of the fingerprint
    ir_hash TEXT NOT NULL REFERENCES blobs(hash),
    convert_layouts INTEGER NOT NULL,
    num_warps INTEGER,
    num_stages INTEGER
);
CREATE INDEX IF NOT EXISTS kernels_cell ON kernels(cell_id);
CREATE INDEX IF NOT EXISTS kernels_ir ON kernels(ir_hash);

-- The digest of one IR text under one rule: computed once per distinct text.
CREATE TABLE IF NOT EXISTS ir_digests (
    ir_hash TEXT NOT NULL REFERENCES blobs(hash),
    rule TEXT NOT NULL,
    digest TEXT NOT NULL,
    PRIMARY KEY (ir_hash, rule)
) WITHOUT ROWID;

-- One fingerprint per cell per rule.
CREATE TABLE IF NOT EXISTS fingerprints (
    cell_id INTEGER NOT NULL REFERENCES cells(id) ON DELETE CASCADE,
    rule TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    PRIMARY KEY (cell_id, rule)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fingerprints_rule ON fingerprints(rule, cell_id);

-- The verdicts the harness itself wrote: screen.tsv, and screen.tsv.orig
-- (the file as it was before a rescore).
CREATE TABLE IF NOT EXISTS recorded_verdicts (
    id INTEGER PRIMARY KEY,
    root_id INTEGER NOT NULL REFERENCES roots(id) ON DELETE CASCADE,
    file TEXT NOT NULL CHECK (file IN ('screen.tsv', 'screen.tsv.orig')),
    line INTEGER NOT NULL,
    op TEXT NOT NULL,
    dtype TEXT NOT NULL DEFAULT '',
    verdict TEXT,                       -- the current name (NO_KERNEL is NO_TRITON)
    raw_verdict TEXT,                   -- as written
    cl_before INTEGER,
    cl_after INTEGER,
    fp_before TEXT,
    fp_after TEXT,
    elapsed_before REAL,
    elapsed_after REAL,
    rc_before INTEGER,
    rc_after INTEGER,
    [[caliber: {f} TEXT]],
    extra TEXT                          -- JSON: columns this release does not know
);
CREATE INDEX IF NOT EXISTS recorded_verdicts_root ON recorded_verdicts(root_id, file, op, dtype);

-- A campaign's plan: which op ran on which card.
CREATE TABLE IF NOT EXISTS partitions (
    id INTEGER PRIMARY KEY,
    root_id INTEGER NOT NULL REFERENCES roots(id) ON DELETE CASCADE,
    line INTEGER NOT NULL,
    card INTEGER,
    op TEXT NOT NULL,
    dtype TEXT NOT NULL DEFAULT '',
    weight_min REAL
);
CREATE INDEX IF NOT EXISTS partitions_root ON partitions(root_id, op);

-- One row per ingest or record run: what was read and when.
CREATE TABLE IF NOT EXISTS ingest_runs (
    id INTEGER PRIMARY KEY,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    command TEXT,
    paths TEXT,                         -- JSON list
    summary TEXT                        -- JSON: the summary the command printed
);

-- What was wrong with what was read: file and line, never silently dropped.
CREATE TABLE IF NOT EXISTS ingest_problems (
    id INTEGER PRIMARY KEY,
    run_id INTEGER REFERENCES ingest_runs(id) ON DELETE CASCADE,
    file TEXT NOT NULL,
    line INTEGER,
    message TEXT NOT NULL
);

-- @views

-- One row per cell: what it is, where each value came from, what it holds.
CREATE VIEW cell_summary AS
SELECT
    cells.id AS cell_id,
    roots.name AS root,
    roots.kind AS root_kind,
    cells.repeat_dir,
    cells.relpath,
    cells.card,
    cells.op,
    cells.dtype,
    cells.side,
    cells.round,
    cells.rc,
    cells.elapsed_s,
    cells.started_at,
    [[caliber: calibers.{f}]],
    cells.n_rows,
    cells.n_counted,
    cells.n_kernels,
    cells.convert_layouts,
    cells.card_source,
    cells.op_source,
    cells.dtype_source,
    cells.side_source,
    cells.round_source,
    cells.caliber_source,
    cells.caliber_missing,
    cells.n_problems,
    cells.path
FROM cells
JOIN roots ON roots.id = cells.root_id
LEFT JOIN calibers ON calibers.id = cells.caliber_id;
