-- GENERATED FILE: do not edit. Written by docs/rendered_sql.py
-- (.venv/bin/python docs/rendered_sql.py); tests/test_schema.py fails while it is stale.
--
-- The SQL zlstore runs, with every macro of render_schema expanded: first
-- schema.sql (the tables, triggers and views a store holds; SQLite keeps the
-- same text: SELECT sql FROM sqlite_master), then the statements the writers
-- run to bring the derived tables up to date (zlstore/store/derive.py: the steps of
-- pairing.py, ranges.py and floors.py), in the order derive() runs them. Edit schema.sql or
-- the Python that defines a name (zlstore/names.py, caliber.py, ...), never this.
-- The other statements built from the macros are in queries.rendered.sql.

-- ===== schema.sql, rendered =====
-- zlstore: the one schema.
--
-- Tables hold what was read; views are the public interface (the CLI reads
-- them, datasette shows them). Tables may change between releases, views keep
-- their columns.
--
-- Macros in double brackets are expanded by zlstore/store/macros.py (render_schema)
-- before this file reaches SQLite, so that each name and rule is defined
-- once: the caliber in zlstore/caliber.py; verdicts, reasons, findings and
-- the round key in zlstore/names.py; the noise floor in zlstore/store/floors.py;
-- fingerprint rules in zlstore/read/ttgir.py. The same macros serve the SQL of
-- derive.py's steps and the canned queries.
--   "caliber: TEMPLATE": TEMPLATE once per caliber field ({f} = the field
--       name), joined with ", "; "caliber SEP: TEMPLATE": joined with SEP
--   "round: TEMPLATE", "round SEP: TEMPLATE": the same per column of the
--       round key ({k}: its name in the ab_* tables, {c}: the cells column
--       it comes from, {is}: how two values compare, = or IS)
--   "range: TEMPLATE": the same per column of a range as ranges.py
--       computes it ({c}: its name in ab_range_rows)
--   "environment: TEMPLATE", "environment SEP: TEMPLATE": the same per
--       provenance field ({f}: its name), zlstore/provenance.py's list
--   "verdict NAME" / "reason NAME" / "finding NAME" / "setting NAME": the
--       quoted name (a setting's default value); an unknown name is an error
--       when the schema is applied
--   "case verdicts": the CASE deciding a pair's verdict, each verdict's
--       condition in names.VERDICTS' order (the first that applies wins),
--       over the columns of one row, verdict_inputs (a CTE right above it);
--       "case reasons": why a row does not pair (NULL: it pairs), over
--       reason_inputs (pairing.py); "case findings": a range's finding, over
--       finding_inputs. names.py's VERDICT_INPUTS, REASON_INPUTS and
--       FINDING_INPUTS name those columns and say what each holds; a
--       condition that reads anything else is an error
--   "clears_floor": whether a range r clears its noise floor floors
--   "machine": an environments row e's machine kind (provenance.MACHINE),
--       NULL where its GPU is unknown
--   "current_side SIDE KEY: ALIAS": the current cell of a side, defined once
--       (zlstore/store/macros.py): SELECT cell_id (the latest cell of the side that
--       no later run superseded) and claims (how many such cells) for the
--       side SIDE of ALIAS's round (KEY round) or screening pair (KEY op);
--       "side_cells SIDE KEY: ALIAS": the FROM and WHERE of those cells
--       (cells c), the ones that claim the side
--   "timeout_rcs": the exit statuses of a cell killed at its timeout;
--       "strictest_rule", "min_rounds", "until_decided": the values (the
--       last: names.STOPPINGS' until-decided, a root's stopping rule)
--   "fact NAME SIDE" / "fact NAME": what holds of a side (before or after)
--       or of the pair, over the columns of a row of inputs (names.FACTS,
--       which the conditions are built from): a pair's note says them
--   "verdicts: TEMPLATE" / "reasons: ..." / "findings: ..." / "rules: ...":
--       TEMPLATE once per verdict (reason, finding, fingerprint rule) in
--       their order, joined with ", "; {position} is 1, 2, ..., and each
--       field ({name}, {when}, {licenses}, ...) is an SQL literal
--
-- Statements are separated by ";" at the end of a line. Section markers
-- (@tables, @triggers and @views, each on a line of its own after "--")
-- tell migrations.py what is recreated on upgrade: triggers and views are dropped
-- and recreated whenever this file changes, tables only through migrations.

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
    backend TEXT NOT NULL, bench_level TEXT NOT NULL, cudagraph TEXT NOT NULL, isolate_tuner_cache TEXT NOT NULL, direct_repeat TEXT NOT NULL, shape_mode TEXT NOT NULL, flagtune TEXT NOT NULL,
    UNIQUE (backend, bench_level, cudagraph, isolate_tuner_cache, direct_repeat, shape_mode, flagtune)
);

-- One row per distinct environment cells ran in: the GPU and its driver,
-- the runtime, torch, Triton and FlagGems versions and commits, Python and
-- the host (zlstore/provenance.py: the one list of fields). Cells point at
-- it (cells.environment_id); a cell that recorded none has NULL: unknown.
-- What may explain a difference, never part of the caliber.
CREATE TABLE IF NOT EXISTS environments (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,           -- the known fields as canonical JSON (provenance.key)
    gpu TEXT, gpu_count TEXT, devices TEXT, driver TEXT, runtime TEXT, torch TEXT, triton TEXT, triton_commit TEXT, flag_gems TEXT, flaggems_commit TEXT, python TEXT, hostname TEXT
);

-- A directory one screening, repeat run or campaign created. A root is
-- what it is, not where: the same tree under another mount point, host or
-- copy is the same root (identity), and its path is where it was seen last.
CREATE TABLE IF NOT EXISTS roots (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,          -- absolute path where last ingested (PATH#... : another root of its name holds PATH)
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
    ingested_at TEXT,
    identity TEXT,                      -- name and env file, hashed (layout.root_identity); not unique: see roots.py
    stopping TEXT,                      -- campaign.env STOPPING (layout.stopping): 'fixed' or 'until-decided'; NULL: no env file
    min_rounds INTEGER                  -- campaign.env MIN_ROUNDS: an until-decided campaign's floor of rounds
);
-- A page of one root (datasette's ?root=NAME, a canned query's :root) finds
-- it by name, then its rows by their root_id indexes: without this, SQLite
-- scans the rows of every root for the few of one.
CREATE INDEX IF NOT EXISTS roots_name ON roots(name);

-- One side of one op in one round on one card: one benchmark process.
-- Every inferred value records where it came from (*_source): cell.env,
-- path, root.env, campaign.env, screen.tsv or partition.tsv.
CREATE TABLE IF NOT EXISTS cells (
    id INTEGER PRIMARY KEY,
    root_id INTEGER NOT NULL REFERENCES roots(id) ON DELETE CASCADE,
    path TEXT NOT NULL UNIQUE,          -- absolute path of the cell directory: its root's path, /, relpath
    relpath TEXT NOT NULL,              -- relative to its root: what the cell is, within its root
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
    stat_sig TEXT,                      -- names, sizes and times: the cheap "unchanged" test (unchanged.py)
    content_sig TEXT,                   -- content hashes: the sure one
    ingested_at TEXT,
    ir_incomplete INTEGER NOT NULL DEFAULT 0,  -- 1: some of its IR could not be read (a problem names it): no IR verdict
    -- when a resumed campaign re-ran its op from the start: kept and shown,
    -- never paired, never counted as done; NULL: current
    superseded_at TEXT,
    environment_id INTEGER REFERENCES environments(id),  -- what it ran on (cell.env's ENV_* keys); NULL: unknown
    -- The card a round keys on (names.ROUND_KEY): a screening pair (round
    -- 0) is one before and one after cell of an op and dtype whatever card
    -- each ran on, or whether a cell.env said it (ARTIFACTS.md, A/B pairing)
    pair_card INTEGER GENERATED ALWAYS AS (CASE WHEN round = 0 THEN NULL ELSE card END) VIRTUAL,
    test_outcome TEXT,                  -- what pytest did with its tests: passed, skipped, deselected, failed, error
    test_reason TEXT                    -- and why (zlstore/read/outcomes.py); both NULL where no plugin reported
);
CREATE INDEX IF NOT EXISTS cells_root ON cells(root_id, op, dtype, round, side);
CREATE UNIQUE INDEX IF NOT EXISTS cells_relpath ON cells(root_id, relpath);
CREATE INDEX IF NOT EXISTS cells_caliber ON cells(caliber_id);
-- Few cells differ in what they ran on: environment_differences starts from
-- the environments and looks their cells up here, not the other way round.
CREATE INDEX IF NOT EXISTS cells_environment ON cells(environment_id);
-- A re-ingest reads every signature of a tree: from this index alone, not
-- from the cells rows, which are wide.
CREATE INDEX IF NOT EXISTS cells_stat_sig ON cells(path, stat_sig);
CREATE INDEX IF NOT EXISTS cells_content ON cells(root_id, content_sig);  -- copies: names.DUPLICATE

-- The directories above the cells that a walk listed, with their times then:
-- while a directory keeps them (adding, removing or renaming an entry changes
-- them), a re-ingest takes its listing from here instead of listing it again
-- (unchanged.py). Only a walk's bookkeeping: no view reads it.
CREATE TABLE IF NOT EXISTS walked_dirs (
    path TEXT PRIMARY KEY,
    ino INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL,
    subdirs TEXT NOT NULL,              -- its subdirectories' names, sorted, '/'-joined (symlinks and triton_cache left out)
    root_files TEXT NOT NULL            -- the root marker files among its entries, '/'-joined
) WITHOUT ROWID;

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
    fallback INTEGER NOT NULL DEFAULT 0, -- timed by the direct fallback (BENCHMARK_DIRECT_NO_CUDAGRAPH)
    occurrence INTEGER                  -- n: the n-th row of its op, dtype and shape in its cell
);
CREATE INDEX IF NOT EXISTS measurements_cell ON measurements(cell_id, op_name, dtype, shape);

-- Content stored once by hash, zlib-compressed: TTGIR texts (a campaign
-- repeats the same IR in every round) and index.tsv files.
CREATE TABLE IF NOT EXISTS blobs (
    hash TEXT PRIMARY KEY,              -- sha256 of the raw bytes
    kind TEXT NOT NULL,                 -- 'ttgir' or 'index.tsv'
    size INTEGER NOT NULL,
    data BLOB NOT NULL,                 -- zlib
    markers TEXT                        -- a .ttgir's: JSON, which fingerprint rule triggers it holds (ttgir.markers); NULL: not known
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
    num_stages INTEGER,
    shared INTEGER                      -- shared memory, bytes (the kernel's .json "shared"); NULL: not given
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
    backend TEXT, bench_level TEXT, cudagraph TEXT, isolate_tuner_cache TEXT, direct_repeat TEXT, shape_mode TEXT, flagtune TEXT,
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
-- A problem stays open (open_problems) until what it names is read again:
-- a cell's or a root's while that cell or root is stored as it was read (a
-- replaced one closes them); any other (a cell that could not be stored, a
-- directory that could not be listed) until a later run covers its file.
CREATE TABLE IF NOT EXISTS ingest_problems (
    id INTEGER PRIMARY KEY,
    run_id INTEGER REFERENCES ingest_runs(id) ON DELETE CASCADE,
    file TEXT NOT NULL,
    line INTEGER,
    message TEXT NOT NULL,
    cell_id INTEGER REFERENCES cells(id) ON DELETE SET NULL,  -- the stored cell it belongs to
    root_id INTEGER REFERENCES roots(id) ON DELETE SET NULL,  -- the stored root it belongs to (its own files)
    closed_by INTEGER                   -- the run that read its file again; NULL: open
);
CREATE INDEX IF NOT EXISTS ingest_problems_open ON ingest_problems(file) WHERE closed_by IS NULL;
CREATE INDEX IF NOT EXISTS ingest_problems_cell ON ingest_problems(cell_id) WHERE cell_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS ingest_problems_root ON ingest_problems(root_id) WHERE root_id IS NOT NULL;

-- A/B pairing, kept by the writers so that reading a campaign's ranges is a
-- lookup, not a pairing of every measured row (the views ab_slots, ab_pairs,
-- ab_rejected and ab_ranges read these; they are not an interface). A
-- "round" is the before and after cell of one cell op and dtype in one round
-- on one card of one root (and one repeat directory). Every insert or delete
-- of a cell marks its round stale (triggers below); zlstore recomputes the
-- stale rounds (zlstore/store/derive.py, pairing.py's steps) inside the same transaction before it
-- commits, so what zlstore commits has none (an edit by hand is recomputed
-- by the next zlstore command that opens or reads the store). The recomputation is the SQL in
-- pairing.py, which is the one definition of a pair.
CREATE TABLE IF NOT EXISTS ab_stale_rounds (
    root_id INTEGER NOT NULL, card INTEGER, repeat_dir TEXT, cell_op TEXT, cell_dtype TEXT, round INTEGER
);

-- One row per measured row identity in a round (see the view ab_slots).
CREATE TABLE IF NOT EXISTS ab_slot_rows (
    root_id INTEGER NOT NULL, card INTEGER, repeat_dir TEXT, cell_op TEXT, cell_dtype TEXT, round INTEGER,
    op TEXT,
    dtype TEXT,
    shape TEXT NOT NULL,
    occurrence INTEGER NOT NULL,
    before_cell_id INTEGER,
    after_cell_id INTEGER,
    before_caliber_id INTEGER,
    after_caliber_id INTEGER,
    before_measurement_id INTEGER,
    after_measurement_id INTEGER,
    before_counted INTEGER,
    after_counted INTEGER,
    before_not_counted TEXT,
    after_not_counted TEXT,
    latency_before REAL,
    latency_after REAL,
    before_fallback INTEGER,
    after_fallback INTEGER,
    reason TEXT                         -- NULL: a pair; else rejection_reasons
);
CREATE INDEX IF NOT EXISTS ab_slot_rows_round ON ab_slot_rows(root_id, cell_op, cell_dtype, round, card);
CREATE INDEX IF NOT EXISTS ab_slot_rows_key ON ab_slot_rows(root_id, op, dtype, shape);

-- One row per (root, row op, dtype, shape, caliber) of a repeat run or
-- campaign with at least one pair, and one with caliber_id NULL for a key
-- that has rows but no pair, with the statistics of its finding (see the
-- view ab_ranges). The columns from finding on hold its judgement (the
-- view ab_range_unjudged) as made under ab_judgement_basis, its JSON text
-- is in ab_range_json: ab_range_judgements reads them where that basis is
-- the current one and judges the range again where it is not. judged
-- NULL: not judged since the range, its q-value or its root changed.
CREATE TABLE IF NOT EXISTS ab_range_rows (
    root_id INTEGER NOT NULL,
    op TEXT,
    dtype TEXT,
    shape TEXT NOT NULL,
    caliber_id INTEGER,
    rounds INTEGER NOT NULL,
    min REAL,
    median REAL,
    max REAL,
    latency_before REAL,                -- the median over the paired rounds of a side's latency
    latency_after REAL,                 -- (the benchmark's unit: ms), each round's the mean of its rows
    fallback INTEGER NOT NULL,
    fallback_rows INTEGER NOT NULL,
    cards INTEGER NOT NULL,
    rejected INTEGER NOT NULL,
    rejected_reasons TEXT,
    log_mean REAL,                      -- mean of ln(ratio) over the paired rounds
    log_sd REAL,                        -- their sample standard deviation (2 rounds on)
    effect REAL,                        -- exp(log_mean): the geometric mean ratio
    ci_low REAL,                        -- the 95% interval of the effect (MIN_ROUNDS on)
    ci_high REAL,
    p_value REAL,                       -- t-test of log_mean = 0 (zlstore/stats.py)
    q_value REAL,                       -- Benjamini-Hochberg over the root's tested ranges
    json_head TEXT,                     -- the JSON of the row before the judged members
    json_tail TEXT,                     -- and after them
    finding TEXT,
    finding_position INTEGER,
    to_settle TEXT,
    noise_floor REAL,
    clears_floor INTEGER,
    floor_note TEXT,
    judged INTEGER,
    floor_rows INTEGER,                 -- the paired rows the noise floor rests on
    floor_roots TEXT,                   -- and the screening roots they came from, comma-separated
    stop_round INTEGER,                 -- until-decided campaign: the round its op stopped after (op_stops)
    stop_reason TEXT                    -- and why (names.STOP_REASONS); NULL: running, or a fixed campaign
);
CREATE INDEX IF NOT EXISTS ab_range_rows_key ON ab_range_rows(root_id, op, dtype, shape, caliber_id);
CREATE INDEX IF NOT EXISTS ab_range_rows_unjudged ON ab_range_rows(root_id) WHERE judged IS NULL;

-- The JSON text of each judged range's ab_ranges row, as `zlstore ab
-- --json` prints it: apart from the range, so that printing a campaign's
-- thousands reads these texts and the key index, nothing else.
CREATE TABLE IF NOT EXISTS ab_range_json (
    range_rowid INTEGER PRIMARY KEY,    -- ab_range_rows.rowid
    json TEXT NOT NULL
);

-- The row identities (root, op, dtype, shape) of re-paired rounds whose
-- ranges are to be computed again, by the write that re-paired them (each
-- batch of a long ingest its own; their roots' q-values wait for its last
-- commit: Benjamini-Hochberg runs over a root's whole family;
-- derive.derive). Duplicates are harmless.
CREATE TABLE IF NOT EXISTS ab_stale_ranges (
    root_id INTEGER NOT NULL,
    op TEXT,
    dtype TEXT,
    shape TEXT NOT NULL
);

-- The ops of an until-decided campaign (roots.stopping) that stopped
-- running rounds: after which round and why (zlstore/store/sequential.py:
-- STOP_REASONS; decided: every range of it faster, slower or no change
-- under the anytime-valid rule). Written by the campaign's runner after
-- each round (sequential.record_stops), kept once written: a resumed
-- campaign keeps what was decided. A range shows its op's stop
-- (ab_range_rows.stop_round, stop_reason; ranges.py).
CREATE TABLE IF NOT EXISTS op_stops (
    id INTEGER PRIMARY KEY,
    root_id INTEGER NOT NULL REFERENCES roots(id) ON DELETE CASCADE,
    op TEXT NOT NULL,                   -- the cell op
    dtype TEXT,                         -- the cell dtype ('' the default set; NULL, unknown, is matched as '')
    round INTEGER NOT NULL,             -- the last round it ran
    reason TEXT NOT NULL,
    recorded_at TEXT
);
CREATE INDEX IF NOT EXISTS op_stops_root ON op_stops(root_id, op, dtype);

-- What the stored judgements of ab_range_rows were made under: the
-- view judging_basis as it was then.
CREATE TABLE IF NOT EXISTS ab_judgement_basis (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    basis TEXT NOT NULL
);

-- One row per screening round with at least one pair: n_rows, min, median
-- and max of the ratio over its paired rows (see the view verdicts).
CREATE TABLE IF NOT EXISTS ab_round_ranges (
    root_id INTEGER NOT NULL, card INTEGER, repeat_dir TEXT, cell_op TEXT, cell_dtype TEXT, round INTEGER,
    before_cell_id INTEGER NOT NULL,
    after_cell_id INTEGER NOT NULL,
    n_rows INTEGER NOT NULL,
    min REAL,
    median REAL,
    max REAL,
    fallback INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS ab_round_ranges_cells ON ab_round_ranges(before_cell_id, after_cell_id);
CREATE INDEX IF NOT EXISTS ab_round_ranges_round ON ab_round_ranges(root_id, cell_op, cell_dtype, round, card);

-- The rounds a side of which more than one current cell claims
-- (names.DUPLICATE; the view duplicate_cells names the cells), with how
-- many claim each side. Kept by pairing.py with the pairs, so that an
-- ingest names them without grouping every stored cell.
CREATE TABLE IF NOT EXISTS ab_duplicate_rounds (
    root_id INTEGER NOT NULL, card INTEGER, repeat_dir TEXT, cell_op TEXT, cell_dtype TEXT, round INTEGER,
    before_claims INTEGER NOT NULL,
    after_claims INTEGER NOT NULL,
    before_copies INTEGER NOT NULL,  -- other cells that hold its cell's files
    after_copies INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS ab_duplicate_rounds_root ON ab_duplicate_rounds(root_id);

-- One row per screening pair (root, cell op, dtype) of a screening root:
-- the current cell of each side and how many current cells claim it (the
-- view verdicts_by_rule reads these; they are not an interface), the
-- verdicts the harness recorded, and the environment fields its cells
-- differ in (environment_differences, a JSON object). Kept by the writers
-- (zlstore/store/screenpairs.py), so that a page of one root reads that root's
-- pairs by index instead of building every pair of the store.
CREATE TABLE IF NOT EXISTS screen_pair_rows (
    root_id INTEGER NOT NULL,
    op TEXT,
    dtype TEXT,
    before_cell_id INTEGER,
    after_cell_id INTEGER,
    before_claims INTEGER,
    after_claims INTEGER,
    recorded_verdict TEXT,
    orig_verdict TEXT,
    environment_differs TEXT
);
CREATE INDEX IF NOT EXISTS screen_pair_rows_key ON screen_pair_rows(root_id, op, dtype);

-- The screening pairs to find again (screenpairs.py): the keys of stale
-- screening rounds, and of a root whose recorded verdicts changed.
CREATE TABLE IF NOT EXISTS screen_stale_pairs (
    root_id INTEGER NOT NULL,
    op TEXT,
    dtype TEXT
);

-- The IR change behind a campaign's findings: per (campaign or repeat
-- root, row op, dtype, rule) with a faster or slower range, its op's IR
-- change summary as `zlstore ab --json` shows it (irchanges.op_changes,
-- JSON), read from the cells before_cell_id and after_cell_id (its
-- screening root's pair, screen_root_id, or its own first round; NULL: no
-- pair answered, see the JSON's problem). Kept by the writers' final
-- derivation (irchanges.derive_changes), so that ab reads them.
CREATE TABLE IF NOT EXISTS ir_change_rows (
    root_id INTEGER NOT NULL,
    op TEXT,
    dtype TEXT,
    rule TEXT NOT NULL,
    screen_root_id INTEGER,
    before_cell_id INTEGER,
    after_cell_id INTEGER,
    changes TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ir_change_rows_key ON ir_change_rows(root_id, op, dtype, rule);

-- Per (rule, screening root, row op, dtype, shape, caliber, machine): the
-- noise floor its NO_IR_DIFF pairs give under that rule (see the view
-- noise_floors, which shows the current rule's pooled per machine, and
-- ab_range_unjudged, which picks the ones a range may be judged beside:
-- ../shared/ARTIFACTS.md, Noise floors). machine: what both sides of the
-- pairs ran on (environment_machines; NULL: unknown). Recomputed for a
-- rule when its fingerprints change (ab_stale_floors) and for every rule
-- when a screening round is re-paired.
CREATE TABLE IF NOT EXISTS noise_floor_rows (
    rule TEXT NOT NULL,
    root_id INTEGER NOT NULL,
    op TEXT,
    dtype TEXT,
    shape TEXT NOT NULL,
    caliber_id INTEGER NOT NULL,
    machine TEXT,
    n INTEGER NOT NULL,
    floor REAL,
    fallback_rows INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS noise_floor_rows_shape ON noise_floor_rows(rule, op, dtype, shape, caliber_id);

-- Per rule with noise floors, its floors as judging_basis spells them
-- (the view noise_floor_texts_now): written with the floors
-- (zlstore/store/floors.py), so that a reader asking whether the stored
-- judgements are current reads one row instead of every floor of the
-- store. A floor edited by hand drops its rule's row (triggers below), and
-- judging_basis spells the floors on the fly until the next writer.
CREATE TABLE IF NOT EXISTS noise_floor_texts (
    rule TEXT PRIMARY KEY,
    text TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS ab_stale_floors (
    rule TEXT PRIMARY KEY
);

-- @triggers

-- Fingerprints deleted by hand move their rule's floors (only a screening
-- cell's can: a campaign has thousands). New ones come from ingest, whose
-- rounds are re-paired anyway, or from Store.compute_fingerprints, which
-- marks its rule itself (zlstore/store/floors.py).
CREATE TRIGGER fingerprints_delete_marks_floors AFTER DELETE ON fingerprints
WHEN EXISTS (SELECT 1 FROM cells JOIN roots ON roots.id = cells.root_id
             WHERE cells.id = OLD.cell_id AND roots.kind = 'screen')
BEGIN
    INSERT OR IGNORE INTO ab_stale_floors (rule) VALUES (OLD.rule);
END;

-- A noise floor inserted, edited or deleted: its rule's spelled floors
-- (noise_floor_texts) are another's now; floors.py writes them again.
CREATE TRIGGER noise_floor_rows_insert_drops_text AFTER INSERT ON noise_floor_rows
BEGIN
    DELETE FROM noise_floor_texts WHERE rule = NEW.rule;
END;

CREATE TRIGGER noise_floor_rows_update_drops_text AFTER UPDATE ON noise_floor_rows
BEGIN
    DELETE FROM noise_floor_texts WHERE rule IN (OLD.rule, NEW.rule);
END;

CREATE TRIGGER noise_floor_rows_delete_drops_text AFTER DELETE ON noise_floor_rows
BEGIN
    DELETE FROM noise_floor_texts WHERE rule = OLD.rule;
END;

-- A verdict the harness recorded is part of its screening pair's row
-- (screen_pair_rows): recorded, edited or gone, the pair is found again.
CREATE TRIGGER recorded_verdicts_insert_marks_pair AFTER INSERT ON recorded_verdicts
BEGIN
    INSERT INTO screen_stale_pairs (root_id, op, dtype) VALUES (NEW.root_id, NEW.op, NEW.dtype);
END;

CREATE TRIGGER recorded_verdicts_delete_marks_pair AFTER DELETE ON recorded_verdicts
BEGIN
    INSERT INTO screen_stale_pairs (root_id, op, dtype) VALUES (OLD.root_id, OLD.op, OLD.dtype);
END;

CREATE TRIGGER recorded_verdicts_update_marks_pair AFTER UPDATE OF root_id, file, line, op, dtype, verdict
ON recorded_verdicts
BEGIN
    INSERT INTO screen_stale_pairs (root_id, op, dtype)
    VALUES (OLD.root_id, OLD.op, OLD.dtype), (NEW.root_id, NEW.op, NEW.dtype);
END;

-- Every insert, delete or edit of a cell marks its round (names.ROUND_KEY)
-- stale; derive.derive pairs it again before the writer commits. So
-- does it the rounds of the cells that hold the same files: a copy makes
-- its original's round a duplicate too, and forgetting it makes it whole
-- again (names.DUPLICATE).
CREATE TRIGGER cells_insert_marks_round AFTER INSERT ON cells
WHEN NEW.side IN ('before', 'after')
BEGIN
    INSERT INTO ab_stale_rounds (root_id, card, repeat_dir, cell_op, cell_dtype, round) VALUES (NEW.root_id, NEW.pair_card, NEW.repeat_dir, NEW.op, NEW.dtype, NEW.round);
    INSERT INTO ab_stale_rounds (root_id, card, repeat_dir, cell_op, cell_dtype, round)
    SELECT o.root_id, o.pair_card, o.repeat_dir, o.op, o.dtype, o.round FROM cells o
    WHERE o.root_id = NEW.root_id AND o.content_sig = NEW.content_sig AND o.id <> NEW.id
      AND o.side IN ('before', 'after');
END;

CREATE TRIGGER cells_delete_marks_round AFTER DELETE ON cells
WHEN OLD.side IN ('before', 'after')
BEGIN
    INSERT INTO ab_stale_rounds (root_id, card, repeat_dir, cell_op, cell_dtype, round) VALUES (OLD.root_id, OLD.pair_card, OLD.repeat_dir, OLD.op, OLD.dtype, OLD.round);
    INSERT INTO ab_stale_rounds (root_id, card, repeat_dir, cell_op, cell_dtype, round)
    SELECT o.root_id, o.pair_card, o.repeat_dir, o.op, o.dtype, o.round FROM cells o
    WHERE o.root_id = OLD.root_id AND o.content_sig = OLD.content_sig AND o.side IN ('before', 'after');
END;

-- Edits by hand (a cell's caliber corrected, a row deleted) re-pair too; the
-- next zlstore command recomputes them, and so does a cell marked superseded
-- (runner.supersede: a round pairs its latest current cell per side). A row inserted into a cell that is
-- already stored is the one change these triggers do not see: zlstore
-- replaces a changed cell whole, rows included.
CREATE TRIGGER cells_update_marks_rounds AFTER UPDATE OF
    root_id, pair_card, repeat_dir, op, dtype, round, card, side, caliber_id, superseded_at, content_sig, n_counted ON cells
BEGIN
    INSERT INTO ab_stale_rounds (root_id, card, repeat_dir, cell_op, cell_dtype, round)
    VALUES (OLD.root_id, OLD.pair_card, OLD.repeat_dir, OLD.op, OLD.dtype, OLD.round), (NEW.root_id, NEW.pair_card, NEW.repeat_dir, NEW.op, NEW.dtype, NEW.round);
    INSERT INTO ab_stale_rounds (root_id, card, repeat_dir, cell_op, cell_dtype, round)
    SELECT o.root_id, o.pair_card, o.repeat_dir, o.op, o.dtype, o.round FROM cells o
    WHERE o.root_id = NEW.root_id AND o.content_sig IN (OLD.content_sig, NEW.content_sig) AND o.id <> NEW.id
      AND o.side IN ('before', 'after');
END;

-- A root's kind decides which of its ranges are kept.
CREATE TRIGGER roots_kind_marks_rounds AFTER UPDATE OF kind ON roots
WHEN OLD.kind IS NOT NEW.kind
BEGIN
    INSERT INTO ab_stale_rounds (root_id, card, repeat_dir, cell_op, cell_dtype, round)
    SELECT DISTINCT root_id, pair_card, repeat_dir, op, dtype, round FROM cells
    WHERE root_id = NEW.id AND side IN ('before', 'after');
    INSERT INTO screen_stale_pairs (root_id, op, dtype)
    SELECT root_id, op, dtype FROM recorded_verdicts WHERE root_id = NEW.id
    UNION SELECT root_id, op, dtype FROM screen_pair_rows WHERE root_id = NEW.id;
END;

-- A root's stopping rule decides how its ranges are tested (ranges.py):
-- a change computes them again.
CREATE TRIGGER roots_stopping_marks_ranges AFTER UPDATE OF stopping ON roots
WHEN OLD.stopping IS NOT NEW.stopping
BEGIN
    INSERT INTO ab_stale_ranges (root_id, op, dtype, shape)
    SELECT DISTINCT root_id, op, dtype, shape FROM ab_range_rows WHERE root_id = NEW.id;
END;

CREATE TRIGGER measurements_update_marks_round AFTER UPDATE ON measurements
BEGIN
    INSERT INTO ab_stale_rounds (root_id, card, repeat_dir, cell_op, cell_dtype, round)
    SELECT root_id, pair_card, repeat_dir, op, dtype, round FROM cells
    WHERE id IN (OLD.cell_id, NEW.cell_id) AND side IN ('before', 'after');
END;

CREATE TRIGGER measurements_delete_marks_round AFTER DELETE ON measurements
BEGIN
    INSERT INTO ab_stale_rounds (root_id, card, repeat_dir, cell_op, cell_dtype, round)
    SELECT root_id, pair_card, repeat_dir, op, dtype, round FROM cells
    WHERE id = OLD.cell_id AND side IN ('before', 'after');
END;

-- A range's statistics edited by hand are judged again (by the view on
-- each read, and stored by the next zlstore write).
CREATE TRIGGER ab_range_rows_edit_unjudges AFTER UPDATE OF
    rounds, caliber_id, log_mean, log_sd, effect, ci_low, ci_high, p_value, q_value, json_head, json_tail
ON ab_range_rows
WHEN NEW.judged IS NOT NULL
BEGIN
    UPDATE ab_range_rows SET judged = NULL WHERE rowid = NEW.rowid;
END;

CREATE TRIGGER ab_range_rows_delete_drops_json AFTER DELETE ON ab_range_rows
BEGIN
    DELETE FROM ab_range_json WHERE range_rowid = OLD.rowid;
END;

-- A root's path is in its ranges' JSON, taken when they are judged (its
-- name and kind are in the fragments kept with each range: a name never
-- changes, it is part of the root's identity, and a change of kind pairs
-- the root's rounds again).
CREATE TRIGGER roots_path_unjudges AFTER UPDATE OF path ON roots
WHEN OLD.path IS NOT NEW.path
BEGIN
    UPDATE ab_range_rows SET judged = NULL WHERE root_id = NEW.id AND judged IS NOT NULL;
END;

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
    calibers.backend, calibers.bench_level, calibers.cudagraph, calibers.isolate_tuner_cache, calibers.direct_repeat, calibers.shape_mode, calibers.flagtune,
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
    cells.path,
    cells.superseded_at,
    cells.environment_id,
    environments.gpu, environments.gpu_count, environments.devices, environments.driver, environments.runtime, environments.torch, environments.triton, environments.triton_commit, environments.flag_gems, environments.flaggems_commit, environments.python, environments.hostname
FROM cells
JOIN roots ON roots.id = cells.root_id
LEFT JOIN calibers ON calibers.id = cells.caliber_id
LEFT JOIN environments ON environments.id = cells.environment_id;

-- What each root's cells ran on: one row per (root, environment) with its
-- count of current cells; environment_id NULL: cells that recorded none
-- (an older harness). `zlstore screen` and `zlstore ab` print it in each
-- root's heading.
CREATE VIEW root_environments AS
SELECT
    roots.name AS root,
    c.root_id,
    c.environment_id,
    count(*) AS cells,
    e.gpu, e.gpu_count, e.devices, e.driver, e.runtime, e.torch, e.triton, e.triton_commit, e.flag_gems, e.flaggems_commit, e.python, e.hostname
FROM cells c
JOIN roots ON roots.id = c.root_id
LEFT JOIN environments e ON e.id = c.environment_id
WHERE c.superseded_at IS NULL
-- roots.name grouped too: a reader's WHERE root = NAME then reaches the
-- one root's cells (roots_name, cells_root) instead of grouping every root's
GROUP BY roots.name, c.root_id, c.environment_id;

-- What makes two environments one machine for a noise floor (ARTIFACTS.md,
-- Noise floors): the GPU model, driver and runtime (provenance.MACHINE), as
-- a JSON array; NULL where the GPU is not known.
CREATE VIEW environment_machines AS
SELECT e.id AS environment_id, CASE WHEN e.gpu IS NOT NULL THEN json_array(e.gpu, e.driver, e.runtime) END AS machine
FROM environments e;

-- The machine each root's current cells ran on: NULL (unknown) unless
-- every one of them recorded the same machine.
CREATE VIEW root_machines AS
SELECT
    r.id AS root_id,
    (SELECT CASE WHEN count(*) = count(m.machine) AND count(DISTINCT m.machine) = 1 THEN max(m.machine) END
     FROM cells c  -- a root's own cells, by cells_root: asked of one root, it reads that root's
     LEFT JOIN environment_machines m ON m.environment_id = c.environment_id
     WHERE c.root_id = r.id AND c.superseded_at IS NULL AND c.side IN ('before', 'after')) AS machine
FROM roots r;

-- A campaign's or repeat run's own screening root (its env file's
-- SCREEN_ROOT): the stored screening root of that path, else of that
-- directory name (a tree moved since), the one of the campaign's host and
-- the latest that started before it first. screen_root_id NULL: none
-- named, or none of it stored.
CREATE VIEW root_screens AS
WITH named AS MATERIALIZED (
    SELECT id, host, started_at, rtrim(screen_root, '/') AS path FROM roots WHERE kind <> 'screen'
),
candidates AS (
    SELECT n.id AS root_id, s.id AS screen_root_id,
           row_number() OVER (
               PARTITION BY n.id
               ORDER BY s.path = n.path DESC, s.host IS n.host DESC,
                        coalesce(s.started_at <= n.started_at, 0) DESC, s.started_at DESC, s.path) AS preference
    FROM named n
    JOIN roots s ON s.kind = 'screen'
     AND (s.path = n.path OR s.name = replace(n.path, rtrim(n.path, replace(n.path, '/', '')), ''))
)
SELECT n.id AS root_id, c.screen_root_id
FROM named n
LEFT JOIN candidates c ON c.root_id = n.id AND c.preference = 1;

-- The provenance fields in which the cells of one (root, cell op, dtype)
-- differ: the two sides of a screening pair, or every round of a campaign's
-- op, ran on two GPU models, drivers or Triton builds. Anything but the
-- switch that differs may explain a difference as well as the switch can;
-- `zlstore screen` and `zlstore ab` warn by field name. values: the known
-- values, a JSON array; by_side: side -> its values (JSON). Unknown values
-- (a cell that recorded none) are not a difference.
CREATE VIEW environment_differences AS
WITH field_values AS (
    SELECT c.root_id, c.op, c.dtype, c.side, f.key AS field, f.value
    FROM environments e  -- CROSS JOIN: the environments first, their cells by cells_environment
    CROSS JOIN cells c ON c.environment_id = e.id
    JOIN json_each(json_object('gpu', e.gpu, 'gpu_count', e.gpu_count, 'devices', e.devices, 'driver', e.driver, 'runtime', e.runtime, 'torch', e.torch, 'triton', e.triton, 'triton_commit', e.triton_commit, 'flag_gems', e.flag_gems, 'flaggems_commit', e.flaggems_commit, 'python', e.python, 'hostname', e.hostname)) f
    WHERE c.superseded_at IS NULL AND f.value IS NOT NULL
),
differing AS (
    SELECT root_id, op, dtype, field, count(DISTINCT value) AS n_values
    FROM field_values
    GROUP BY root_id, op, dtype, field
    HAVING count(DISTINCT value) > 1
)
SELECT
    roots.name AS root,
    d.op,
    d.dtype,
    d.field,
    d.n_values,
    (SELECT json_group_array(value) FROM (
        SELECT DISTINCT value FROM field_values v
        WHERE v.root_id = d.root_id AND v.op IS d.op AND v.dtype IS d.dtype AND v.field = d.field
        ORDER BY value)) AS "values",
    (SELECT json_group_object(side, side_values) FROM (
        SELECT side, group_concat(value, ' | ') AS side_values FROM (
            SELECT DISTINCT side, value FROM field_values v
            WHERE v.root_id = d.root_id AND v.op IS d.op AND v.dtype IS d.dtype AND v.field = d.field
            ORDER BY side, value)
        GROUP BY side ORDER BY side)) AS by_side,
    d.root_id
FROM differing d
JOIN roots ON roots.id = d.root_id;

-- environment_differences per A/B range key: a range's rows come from the
-- cells of its round's cell op (a cell may hold rows of several ops).
CREATE VIEW range_environment_differences AS
SELECT DISTINCT s.root_id, s.op, s.dtype, d.field, d."values", d.by_side
FROM environment_differences d  -- CROSS JOIN: the few differing keys first, then their slot rows by index
CROSS JOIN (SELECT root_id, cell_op AS op_of_cells, cell_dtype AS dtype_of_cells, op, dtype FROM ab_slot_rows) s
    ON s.root_id = d.root_id AND s.op_of_cells IS d.op AND s.dtype_of_cells IS d.dtype;

-- The problems with the input that are still there: each names its file (and
-- line), with the root and cell it belongs to and the run that found it.
-- `zlstore problems` prints it; an ingest counts it under what it covered.
CREATE VIEW open_problems AS
SELECT
    p.file,
    p.line,
    p.message,
    roots.name AS root,
    cells.relpath AS cell,
    runs.command,
    runs.started_at AS found_at,
    p.run_id,
    p.cell_id,
    coalesce(p.root_id, cells.root_id) AS root_id,
    p.id
FROM ingest_problems p
LEFT JOIN cells ON cells.id = p.cell_id
LEFT JOIN roots ON roots.id = coalesce(p.root_id, cells.root_id)
LEFT JOIN ingest_runs runs ON runs.id = p.run_id
WHERE p.closed_by IS NULL;

-- Pairs of current cells of one root that hold the same files
-- (cells.content_sig), the first with counted rows: no two benchmark
-- processes write the same run.log, so one of the two is a copy (a repeat
-- directory copied to ab_X.bak, a round copied into another card), and
-- both rounds would count one measurement (names.DUPLICATE). pairing.py
-- counts a side's copies here.
CREATE VIEW cell_copies AS
SELECT c.id AS cell_id, o.id AS copy_id, c.root_id
FROM cells c
JOIN cells o ON o.root_id = c.root_id AND o.content_sig = c.content_sig AND o.id <> c.id
WHERE c.n_counted > 0 AND c.side IN ('before', 'after') AND c.superseded_at IS NULL
  AND o.side IN ('before', 'after') AND o.superseded_at IS NULL;

-- The sides of a round (or of a screening pair) that more than one current
-- cell claims, or whose cell's files another current cell of the root
-- holds: a copied cell or round directory. None of that round's rows pairs
-- (reason DUPLICATE_CELL) and the pair's verdict is DUPLICATE_CELL, until
-- the copies are forgotten (`zlstore forget CELL_PATH`). claims: the cells
-- that claim the side; cells: their paths in the root, one a line, oldest
-- first; copies / same_files: the other cells that hold the files of the
-- latest of them. `zlstore problems` lists them; an ingest counts them
-- under the roots it covered.
CREATE VIEW duplicate_cells AS
WITH sides AS (
    SELECT d.*, s.side,
        CASE s.side WHEN 'before' THEN d.before_claims ELSE d.after_claims END AS claims,
        CASE s.side WHEN 'before' THEN d.before_copies ELSE d.after_copies END AS copies,
        (SELECT cell_id FROM (SELECT max(c.id) AS cell_id, count(*) AS claims FROM cells c
WHERE c.root_id = d.root_id AND c.pair_card IS d.card AND c.repeat_dir IS d.repeat_dir AND c.op IS d.cell_op AND c.dtype IS d.cell_dtype AND c.round IS d.round AND c.side = s.side AND c.superseded_at IS NULL)) AS latest_cell_id
    FROM ab_duplicate_rounds d
    CROSS JOIN (SELECT 'before' AS side UNION ALL SELECT 'after') s
)
SELECT
    roots.name AS root,
    sides.card,
    sides.repeat_dir,
    sides.cell_op AS op,
    sides.cell_dtype AS dtype,
    sides.round,
    sides.side,
    sides.claims,
    (SELECT group_concat(relpath, char(10)) FROM (
        SELECT c.relpath FROM cells c
WHERE c.root_id = sides.root_id AND c.pair_card IS sides.card AND c.repeat_dir IS sides.repeat_dir AND c.op IS sides.cell_op AND c.dtype IS sides.cell_dtype AND c.round IS sides.round AND c.side = sides.side AND c.superseded_at IS NULL
        ORDER BY c.id)) AS cells,
    sides.copies,
    (SELECT group_concat(o.relpath, char(10)) FROM cell_copies k JOIN cells o ON o.id = k.copy_id
     WHERE k.cell_id = sides.latest_cell_id) AS same_files,
    sides.latest_cell_id,
    sides.root_id
FROM sides
JOIN roots ON roots.id = sides.root_id
WHERE sides.claims > 1 OR sides.copies > 0;

-- ---------------------------------------------------------------------------
-- Judging (issue 3). Every number below is either a finding with its
-- evidence or labelled as something else. Ratio = latency before / latency
-- after (above 1: the switch made it faster). Median = the middle value, or
-- the mean of the two middle values for an even count.

-- The verdicts in the order they are decided (the first that applies wins),
-- what each licenses, and what a speedup range of such a pair is
-- (range_label NULL: no range is ever shown). From names.VERDICTS.
CREATE VIEW verdict_kinds (position, verdict, decided_when, licenses, range_label) AS
VALUES (1, 'DUPLICATE_CELL', 'a side is claimed by more than one stored cell, or another holds the same files (a copied cell directory?)', 'nothing: which cell measured that side cannot be told; forget the copy (zlstore problems names both)', NULL), (2, 'TRUNCATED', 'either side''s RC is 124 or 137 (killed at CELL_TIMEOUT)', 'nothing: re-run with a larger timeout', NULL), (3, 'NO_ROWS', 'either side has no counted measurement', 'nothing (usually the dtype)', NULL), (4, 'IR_UNREAD', 'a side''s IR could not be read in full (cells.ir_incomplete)', 'nothing: a side''s IR could not be read in full; fix the files and ingest again', NULL), (5, 'NO_TRITON', 'both sides compiled no .ttgir at all', 'nothing: the Triton pass under test had nothing to act on', NULL), (6, 'IR_CHANGED', 'the two fingerprints differ', 'measure it with repeated rounds', 'indicative (one round)'), (7, 'NO_IR_DIFF', 'the fingerprints are equal', 'skip it; its speedup range is the machine''s noise floor for that op', 'noise floor');

-- Why a measured row did not become an A/B pair, in order of precedence
-- (the first that applies is the row's reason). From names.REASONS.
CREATE VIEW rejection_reasons (position, reason, meaning) AS
VALUES (1, 'DUPLICATE_CELL', 'more than one stored cell claims a side of the round, or another holds the same files (a copied cell directory?)'), (2, 'CALIBER_UNKNOWN', 'at least one cell''s caliber could not be established'), (3, 'CALIBER_MISMATCH', 'the two cells were measured under different calibers'), (4, 'MISSING_SIDE', 'the row (or its whole cell) exists on one side of the round only'), (5, 'NOT_COUNTED', 'the row is not a counted measurement on at least one side');

-- What a repeat run's or campaign's range says about the switch, in the
-- order they are shown (findings first); the conditions never overlap
-- (ab_ranges decides them). From names.FINDINGS.
CREATE VIEW finding_kinds (position, finding, decided_when, licenses) AS
VALUES (1, 'faster', 'q_value <= q_max and the whole interval lies above 1 + min_effect', 'saying the switch made this shape faster, by about the effect'), (2, 'slower', 'q_value <= q_max and the whole interval lies below 1 / (1 + min_effect)', 'saying the switch made this shape slower, by about the effect'), (3, 'no change', 'the whole interval lies within 1 / (1 + min_effect) .. 1 + min_effect', 'saying that any change is smaller than min_effect (an equivalence result)'), (4, 'inconclusive', 'none of the above: the interval straddles a bound, or q_value > q_max', 'nothing yet: to_settle says what would settle it (more rounds, a quieter card)'), (5, 'too few rounds', 'fewer paired rounds than the test needs (min_rounds)', 'nothing: run more rounds');

-- The fingerprint rules, from the one that keeps the most to the one that
-- leaves the most out (zlstore/read/ttgir.py): what each leaves out of a
-- fingerprint, and the hint a verdict under it carries where the strictest
-- rule finds no difference.
CREATE VIEW fingerprint_rules (position, rule, description, ignores, strictest_hint) AS
VALUES (1, 'v1', 'raw .ttgir texts plus the raw bytes of index.tsv', NULL, 'differs only in index.tsv cache hashes, ttg.rlc-* annotations and source locations: NO_IR_DIFF under v4'), (2, 'v2', 'raw .ttgir texts', 'index.tsv cache hashes', 'differs only in ttg.rlc-* annotations and source locations: NO_IR_DIFF under v4'), (3, 'v3', '.ttgir texts without the switch''s ttg.rlc-* annotations', 'index.tsv cache hashes, ttg.rlc-* annotations', 'differs only in source locations: NO_IR_DIFF under v4'), (4, 'v4', '.ttgir texts without ttg.rlc-* annotations and without loc() location information', 'index.tsv cache hashes, ttg.rlc-* annotations, source locations', NULL);

-- The one row of settings that judging reads: the current fingerprint rule,
-- the strictest rule, and a finding's thresholds (q_max: the false-discovery
-- rate a finding is held to; min_effect: the smallest change worth calling
-- faster or slower, as a fraction; min_rounds: fewer paired rounds get no
-- test). `zlstore rule` and the settings table change the first three.
CREATE VIEW judging_settings AS
WITH given AS MATERIALIZED (
    SELECT
        (SELECT value FROM settings WHERE key = 'current_rule') AS rule,
        (SELECT value FROM settings WHERE key = 'q_max') AS q_max,
        (SELECT value FROM settings WHERE key = 'min_effect') AS min_effect
),
-- A setting edited by hand to something that is not one (an unknown rule,
-- 'nan', 'inf', a negative or an empty text: SQLite reads those as 0, which
-- would call every range a finding) is not used: its default is, and
-- settings_note says so.
valid AS MATERIALIZED (
    SELECT
        given.*,
        given.rule IN (SELECT rule FROM fingerprint_rules) AS rule_ok,
        CAST(given.q_max AS REAL) > 0 AND CAST(given.q_max AS REAL) <= 1 AS q_max_ok,
        CAST(given.min_effect AS REAL) > 0 AND CAST(given.min_effect AS REAL) < 1e300 AS min_effect_ok
    FROM given
)
SELECT
    CASE WHEN rule_ok THEN rule ELSE 'v3' END AS current_rule,
    'v4' AS strictest_rule,
    CASE WHEN q_max_ok THEN CAST(q_max AS REAL) ELSE CAST('0.05' AS REAL) END AS q_max,
    CASE WHEN min_effect_ok THEN CAST(min_effect AS REAL) ELSE CAST('0.02' AS REAL) END AS min_effect,
    3 AS min_rounds,
    nullif(substr(
        CASE WHEN rule IS NOT NULL AND NOT rule_ok
             THEN '; current_rule ' || quote(rule) || ' is not a rule: ' || 'v3' || ' used' ELSE '' END
        || CASE WHEN q_max IS NOT NULL AND NOT q_max_ok
             THEN '; q_max ' || quote(q_max) || ' is not in (0, 1]: ' || '0.05' || ' used' ELSE '' END
        || CASE WHEN min_effect IS NOT NULL AND NOT min_effect_ok
             THEN '; min_effect ' || quote(min_effect) || ' is not a positive number: ' || '0.02'
                  || ' used' ELSE '' END, 3), '') AS settings_note
FROM valid;

-- One row per measured row identity in a round, both sides side by side.
-- A round is the before and after cell of one cell op and dtype in one
-- round on one card of one root (and one campaign repeat directory); a row
-- identity is the row's own op, dtype and canonical shape, plus its
-- occurrence (the n-th row of that identity in its cell pairs with the
-- n-th on the other side). `reason` is the one definition of an A/B pair:
-- NULL when the row is present and counted on both sides and both cells
-- have the same known caliber; otherwise why not, the first that applies
-- of rejection_reasons (caliber first: a row under an unknown or different
-- caliber could never pair, whatever else holds). ab_pairs is reason IS
-- NULL, ab_rejected the rest: together, every row. Licenses nothing itself.
-- Read from ab_slot_rows, which the writers keep (zlstore/store/pairing.py holds
-- the pairing SQL).
CREATE VIEW ab_slots AS
SELECT
    roots.name AS root,
    roots.kind AS root_kind,
    s.card,
    s.op,
    s.dtype,
    s.shape,
    s.round,
    s.occurrence,
    s.repeat_dir,
    s.cell_op,
    s.cell_dtype,
    s.before_cell_id,
    s.after_cell_id,
    s.before_caliber_id,
    s.after_caliber_id,
    cb.caliber_missing AS before_caliber_missing,
    ca.caliber_missing AS after_caliber_missing,
    s.before_measurement_id,
    s.after_measurement_id,
    s.before_counted,
    s.after_counted,
    s.before_not_counted,
    s.after_not_counted,
    s.latency_before,
    s.latency_after,
    s.before_fallback,
    s.after_fallback,
    s.reason,
    s.root_id
FROM ab_slot_rows s
JOIN roots ON roots.id = s.root_id
LEFT JOIN cells cb ON cb.id = s.before_cell_id
LEFT JOIN cells ca ON ca.id = s.after_cell_id;

-- One row per paired measurement: the same row (its own op, dtype and
-- canonical shape) counted on both sides of one round, both cells of the
-- same known caliber. Licenses comparing latency_before with latency_after;
-- ratio = before / after; fallback = 1 when either side was timed by the
-- direct fallback (BENCHMARK_DIRECT_NO_CUDAGRAPH), a different regime.
-- A cross-caliber or unknown-caliber row never appears here.
CREATE VIEW ab_pairs AS
SELECT
    ab_slots.root,
    ab_slots.card,
    ab_slots.op,
    ab_slots.dtype,
    ab_slots.shape,
    ab_slots.round,
    ab_slots.latency_before,
    ab_slots.latency_after,
    ab_slots.latency_before / ab_slots.latency_after AS ratio,
    max(ab_slots.before_fallback, ab_slots.after_fallback) AS fallback,
    ab_slots.root_kind,
    ab_slots.repeat_dir,
    ab_slots.cell_op,
    ab_slots.cell_dtype,
    ab_slots.occurrence,
    ab_slots.before_caliber_id AS caliber_id,
    calibers.backend, calibers.bench_level, calibers.cudagraph, calibers.isolate_tuner_cache, calibers.direct_repeat, calibers.shape_mode, calibers.flagtune,
    ab_slots.before_cell_id,
    ab_slots.after_cell_id,
    ab_slots.before_measurement_id,
    ab_slots.after_measurement_id,
    ab_slots.root_id
FROM ab_slots
JOIN calibers ON calibers.id = ab_slots.before_caliber_id
WHERE ab_slots.reason IS NULL;

-- One row per row identity in a round that did not pair, with why; licenses
-- nothing except knowing a range is incomplete. sides: before, after, or
-- both (present on both sides, yet not paired). reason, the first that
-- applies, in this precedence (rejection_reasons): DUPLICATE_CELL (more
-- than one stored cell claims a side of the round: `differences` names
-- the round's cells; view duplicate_cells), CALIBER_UNKNOWN (a
-- side's cell has no known caliber; `fields` names the fields nothing
-- established), CALIBER_MISMATCH (the two cells' calibers differ; `fields`
-- names the differing caliber fields, `differences` their values),
-- MISSING_SIDE (the row, or its whole cell, exists on one side only),
-- NOT_COUNTED (error_msg, or a missing/zero/negative/non-finite latency on
-- a side; `not_counted` says which side and why). A claimed-twice side
-- first, then caliber: a row under an unknown or different caliber could
-- never pair, whatever else.
-- Why a cell has the rows it has, as pytest saw it (cells.test_outcome and
-- test_reason, from zlstore flaggems' plugin: zlstore/read/outcomes.py): why is
-- "skipped: CUDA not available", "deselected: no test matched -m fft (3
-- deselected)", "error: ..."; for a cell whose tests passed and recorded
-- nothing with a --dtypes of its own, that the dtype may not be among the
-- op's; NULL where no plugin reported. NO_ROWS notes and MISSING_SIDE rows
-- (ab_rejected.why_missing) show it.
CREATE VIEW cell_test_notes AS
SELECT
    id AS cell_id,
    test_outcome,
    test_reason,
    CASE
        WHEN test_outcome IS NULL THEN NULL
        WHEN test_outcome = 'passed' AND coalesce(dtype, '') <> '' AND n_counted = 0
            THEN 'its tests passed and recorded no row at dtype ' || dtype || ': not among the op''s dtypes?'
        WHEN test_outcome = 'passed' THEN test_reason
        ELSE test_outcome || coalesce(': ' || test_reason, '')
    END AS why
FROM cells;

CREATE VIEW ab_rejected AS
SELECT
    s.root,
    s.card,
    s.op,
    s.dtype,
    s.shape,
    s.round,
    CASE WHEN s.before_measurement_id IS NOT NULL AND s.after_measurement_id IS NOT NULL THEN 'both'
         WHEN s.before_measurement_id IS NOT NULL THEN 'before'
         ELSE 'after' END AS sides,
    s.reason,
    CASE
        WHEN s.reason = 'CALIBER_UNKNOWN' THEN nullif(substr(
            CASE WHEN instr(',' || coalesce(s.before_caliber_missing, '') || ',' || coalesce(s.after_caliber_missing, '') || ',', ',backend,') THEN ', backend' ELSE '' END || CASE WHEN instr(',' || coalesce(s.before_caliber_missing, '') || ',' || coalesce(s.after_caliber_missing, '') || ',', ',bench_level,') THEN ', bench_level' ELSE '' END || CASE WHEN instr(',' || coalesce(s.before_caliber_missing, '') || ',' || coalesce(s.after_caliber_missing, '') || ',', ',cudagraph,') THEN ', cudagraph' ELSE '' END || CASE WHEN instr(',' || coalesce(s.before_caliber_missing, '') || ',' || coalesce(s.after_caliber_missing, '') || ',', ',isolate_tuner_cache,') THEN ', isolate_tuner_cache' ELSE '' END || CASE WHEN instr(',' || coalesce(s.before_caliber_missing, '') || ',' || coalesce(s.after_caliber_missing, '') || ',', ',direct_repeat,') THEN ', direct_repeat' ELSE '' END || CASE WHEN instr(',' || coalesce(s.before_caliber_missing, '') || ',' || coalesce(s.after_caliber_missing, '') || ',', ',shape_mode,') THEN ', shape_mode' ELSE '' END || CASE WHEN instr(',' || coalesce(s.before_caliber_missing, '') || ',' || coalesce(s.after_caliber_missing, '') || ',', ',flagtune,') THEN ', flagtune' ELSE '' END, 3), '')
        WHEN s.reason = 'CALIBER_MISMATCH' THEN substr(
            CASE WHEN cb.backend IS NOT ca.backend THEN ', backend' ELSE '' END || CASE WHEN cb.bench_level IS NOT ca.bench_level THEN ', bench_level' ELSE '' END || CASE WHEN cb.cudagraph IS NOT ca.cudagraph THEN ', cudagraph' ELSE '' END || CASE WHEN cb.isolate_tuner_cache IS NOT ca.isolate_tuner_cache THEN ', isolate_tuner_cache' ELSE '' END || CASE WHEN cb.direct_repeat IS NOT ca.direct_repeat THEN ', direct_repeat' ELSE '' END || CASE WHEN cb.shape_mode IS NOT ca.shape_mode THEN ', shape_mode' ELSE '' END || CASE WHEN cb.flagtune IS NOT ca.flagtune THEN ', flagtune' ELSE '' END, 3)
    END AS fields,
    CASE
        WHEN s.reason = 'CALIBER_UNKNOWN' THEN nullif(substr(
            CASE WHEN s.before_cell_id IS NOT NULL AND s.before_caliber_id IS NULL
                 THEN '; before: no ' || coalesce(replace(s.before_caliber_missing, ',', ', no '), 'known caliber') ELSE '' END
            || CASE WHEN s.after_cell_id IS NOT NULL AND s.after_caliber_id IS NULL
                 THEN '; after: no ' || coalesce(replace(s.after_caliber_missing, ',', ', no '), 'known caliber') ELSE '' END,
            3), '')
        WHEN s.reason = 'DUPLICATE_CELL' THEN 'cells of this round: ' || (
            SELECT group_concat(c.relpath, ', ') FROM cells c
            WHERE c.root_id = s.root_id AND c.pair_card IS s.card AND c.repeat_dir IS s.repeat_dir AND c.op IS s.cell_op AND c.dtype IS s.cell_dtype AND c.round IS s.round AND c.side IS NOT NULL AND c.superseded_at IS NULL)
            || coalesce('; the same files as theirs: ' || (
                SELECT group_concat(o.relpath, ', ') FROM cell_copies k JOIN cells o ON o.id = k.copy_id
                WHERE k.cell_id IN (s.before_cell_id, s.after_cell_id)), '')
        WHEN s.reason = 'CALIBER_MISMATCH' THEN substr(
            CASE WHEN cb.backend IS NOT ca.backend THEN ', backend: ' || cb.backend || ' before, ' || ca.backend || ' after' ELSE '' END || CASE WHEN cb.bench_level IS NOT ca.bench_level THEN ', bench_level: ' || cb.bench_level || ' before, ' || ca.bench_level || ' after' ELSE '' END || CASE WHEN cb.cudagraph IS NOT ca.cudagraph THEN ', cudagraph: ' || cb.cudagraph || ' before, ' || ca.cudagraph || ' after' ELSE '' END || CASE WHEN cb.isolate_tuner_cache IS NOT ca.isolate_tuner_cache THEN ', isolate_tuner_cache: ' || cb.isolate_tuner_cache || ' before, ' || ca.isolate_tuner_cache || ' after' ELSE '' END || CASE WHEN cb.direct_repeat IS NOT ca.direct_repeat THEN ', direct_repeat: ' || cb.direct_repeat || ' before, ' || ca.direct_repeat || ' after' ELSE '' END || CASE WHEN cb.shape_mode IS NOT ca.shape_mode THEN ', shape_mode: ' || cb.shape_mode || ' before, ' || ca.shape_mode || ' after' ELSE '' END || CASE WHEN cb.flagtune IS NOT ca.flagtune THEN ', flagtune: ' || cb.flagtune || ' before, ' || ca.flagtune || ' after' ELSE '' END, 3)
    END AS differences,
    nullif(
        CASE WHEN s.before_counted = 0 THEN 'before: ' || coalesce(s.before_not_counted, 'not counted') ELSE '' END
        || CASE WHEN s.before_counted = 0 AND s.after_counted = 0 THEN '; ' ELSE '' END
        || CASE WHEN s.after_counted = 0 THEN 'after: ' || coalesce(s.after_not_counted, 'not counted') ELSE '' END,
        '') AS not_counted,
    CASE WHEN s.reason = 'MISSING_SIDE' THEN nullif(substr(
        CASE WHEN s.before_measurement_id IS NULL
             THEN coalesce('; before: ' || (SELECT why FROM cell_test_notes WHERE cell_id = s.before_cell_id), '')
             ELSE '' END
        || CASE WHEN s.after_measurement_id IS NULL
             THEN coalesce('; after: ' || (SELECT why FROM cell_test_notes WHERE cell_id = s.after_cell_id), '')
             ELSE '' END, 3), '') END AS why_missing,
    s.root_kind,
    s.repeat_dir,
    s.cell_op,
    s.cell_dtype,
    s.occurrence,
    s.before_cell_id,
    s.after_cell_id,
    s.before_caliber_id,
    s.after_caliber_id,
    s.before_measurement_id,
    s.after_measurement_id,
    s.root_id
FROM ab_slots s
LEFT JOIN calibers cb ON cb.id = s.before_caliber_id
LEFT JOIN calibers ca ON ca.id = s.after_caliber_id
WHERE s.reason IS NOT NULL;

-- One row per (root, op, dtype) screening pair under every fingerprint rule
-- (fingerprint_rules; so rules can be compared in SQL); `verdicts` is this
-- under the current rule. verdict: the first that applies of verdict_kinds
-- (TRUNCATED: either rc 124/137; NO_ROWS: a side missing or without a
-- counted row; NO_TRITON: neither side compiled a .ttgir; IR_CHANGED /
-- NO_IR_DIFF: the fingerprints under the rule differ / are equal; NULL
-- only when a fingerprint under the rule was never computed, see `note`).
-- What it licenses is in `licenses`. The speedup range (n_rows, min,
-- median, max over the pair's paired rows) is given only where range_label
-- is: 'indicative (one round)' for IR_CHANGED (one round per shape is never
-- a result: measure it with repeated rounds), 'noise floor' (not a result)
-- for NO_IR_DIFF; TRUNCATED, NO_ROWS and NO_TRITON have no range, and
-- DUPLICATE_CELL (a side several cells claim, or a copy) no per-side values
-- either: they would be one claimant's, taken at random. hint: an
-- IR_CHANGED pair whose fingerprints are equal under the strictest rule
-- (judging_settings) says what alone differs, e.g. source locations.
-- recorded_verdict / orig_verdict: what the harness wrote in screen.tsv /
-- screen.tsv.orig (NO_KERNEL read as NO_TRITON). The caliber is the pair's
-- common caliber (NULL when unknown or when the sides differ; see note).
CREATE VIEW verdicts_by_rule AS
WITH
rules AS (
    SELECT rule FROM fingerprint_rules
),
-- The row the verdict's CASE reads (names.VERDICT_INPUTS): one pair under
-- one rule; each before_X has its after_X. cell_id: the side's current
-- cell, NULL where it has none; rc: its exit status; n_counted: its counted
-- measurements; ir_incomplete: 1 where its IR could not be read in full;
-- n_kernels: the .ttgir it compiled; fingerprint: its fingerprint under the
-- rule (NULL: not computed); claims: the current cells that claim the side
-- (more than 1: a copy); copies: the other current cells that hold its
-- files (0: none); caliber_id: its cell's caliber (NULL: unknown; the note
-- reads it, no verdict does). Beside them, what the pair shows with its
-- verdict.
verdict_inputs AS (
    SELECT
        pairs.root_id, pairs.op, pairs.dtype, rules.rule,
        pairs.recorded_verdict, pairs.orig_verdict,
        pairs.before_cell_id, pairs.after_cell_id,
        b.rc AS before_rc, a.rc AS after_rc,
        b.n_counted AS before_n_counted, a.n_counted AS after_n_counted,
        b.ir_incomplete AS before_ir_incomplete, a.ir_incomplete AS after_ir_incomplete,
        b.n_kernels AS before_n_kernels, a.n_kernels AS after_n_kernels,
        fb.fingerprint AS before_fingerprint, fa.fingerprint AS after_fingerprint,
        pairs.before_claims, pairs.after_claims,
        coalesce(db.before_copies, 0) AS before_copies, coalesce(da.after_copies, 0) AS after_copies,
        b.caliber_id AS before_caliber_id, a.caliber_id AS after_caliber_id,
        -- shown beside the verdict, not read by it
        b.convert_layouts AS before_convert_layouts, a.convert_layouts AS after_convert_layouts,
        b.elapsed_s AS before_elapsed_s, a.elapsed_s AS after_elapsed_s,
        sb.fingerprint = sa.fingerprint AS strictest_same,
        pairs.environment_differs
    FROM screen_pair_rows pairs  -- kept by the writers (screenpairs.py): one root's pairs by index
    CROSS JOIN rules
    LEFT JOIN cells b ON b.id = pairs.before_cell_id
    LEFT JOIN cells a ON a.id = pairs.after_cell_id
    LEFT JOIN ab_duplicate_rounds db ON db.root_id = b.root_id AND db.card IS b.pair_card AND db.repeat_dir IS b.repeat_dir AND db.cell_op IS b.op AND db.cell_dtype IS b.dtype AND db.round IS b.round
    LEFT JOIN ab_duplicate_rounds da ON da.root_id = a.root_id AND da.card IS a.pair_card AND da.repeat_dir IS a.repeat_dir AND da.cell_op IS a.op AND da.cell_dtype IS a.dtype AND da.round IS a.round
    LEFT JOIN fingerprints fb ON fb.cell_id = pairs.before_cell_id AND fb.rule = rules.rule
    LEFT JOIN fingerprints fa ON fa.cell_id = pairs.after_cell_id AND fa.rule = rules.rule
    LEFT JOIN fingerprints sb ON sb.cell_id = pairs.before_cell_id AND sb.rule = 'v4'
    LEFT JOIN fingerprints sa ON sa.cell_id = pairs.after_cell_id AND sa.rule = 'v4'
),
judged AS (
    SELECT
        root_id, op, dtype, rule, recorded_verdict, orig_verdict, before_cell_id, after_cell_id,
        before_rc AS rc_before, after_rc AS rc_after,
        before_fingerprint AS fp_before, after_fingerprint AS fp_after,
        CASE
            WHEN before_claims > 1 OR after_claims > 1 OR before_copies > 0 OR after_copies > 0 THEN 'DUPLICATE_CELL'
            WHEN before_rc IN (124, 137) OR after_rc IN (124, 137) THEN 'TRUNCATED'
            WHEN before_cell_id IS NULL OR after_cell_id IS NULL OR before_n_counted = 0 OR after_n_counted = 0 THEN 'NO_ROWS'
            WHEN before_ir_incomplete OR after_ir_incomplete THEN 'IR_UNREAD'
            WHEN before_n_kernels = 0 AND after_n_kernels = 0 THEN 'NO_TRITON'
            WHEN before_fingerprint <> after_fingerprint THEN 'IR_CHANGED'
            WHEN before_fingerprint = after_fingerprint THEN 'NO_IR_DIFF'
        END AS verdict,
        CASE
            WHEN before_cell_id IS NULL THEN after_caliber_id
            WHEN after_cell_id IS NULL THEN before_caliber_id
            WHEN before_caliber_id = after_caliber_id THEN before_caliber_id
        END AS caliber_id,
        -- which of the verdicts' facts hold, of which side (names.FACTS), and why
        nullif(substr(
            CASE WHEN before_claims > 1 THEN '; ' || before_claims || ' cells claim the before side' ELSE '' END
            || CASE WHEN after_claims > 1 THEN '; ' || after_claims || ' cells claim the after side' ELSE '' END
            || CASE WHEN before_copies > 0 THEN '; the before cell''s files are another cell''s too' ELSE '' END
            || CASE WHEN after_copies > 0 THEN '; the after cell''s files are another cell''s too' ELSE '' END
            || CASE WHEN before_cell_id IS NULL AND after_cell_id IS NULL THEN '; no cell stored for either side'
                 WHEN before_cell_id IS NULL THEN '; ' || 'MISSING_SIDE' || ': no before cell stored'
                 WHEN after_cell_id IS NULL THEN '; ' || 'MISSING_SIDE' || ': no after cell stored' ELSE '' END
            || CASE WHEN before_rc IN (124, 137) THEN '; before killed at its timeout (rc ' || before_rc || ')' ELSE '' END
            || CASE WHEN after_rc IN (124, 137) THEN '; after killed at its timeout (rc ' || after_rc || ')' ELSE '' END
            || CASE WHEN before_n_counted = 0 THEN '; before has no counted row'
                    || coalesce(' (' || (SELECT why FROM cell_test_notes WHERE cell_id = before_cell_id) || ')', '') ELSE '' END
            || CASE WHEN after_n_counted = 0 THEN '; after has no counted row'
                    || coalesce(' (' || (SELECT why FROM cell_test_notes WHERE cell_id = after_cell_id) || ')', '') ELSE '' END
            || CASE WHEN (before_cell_id IS NOT NULL AND before_fingerprint IS NULL) OR (after_cell_id IS NOT NULL AND after_fingerprint IS NULL)
                    THEN '; fingerprint under ' || rule || ' not computed' ELSE '' END
            || CASE WHEN before_caliber_id <> after_caliber_id THEN '; calibers differ between the sides' ELSE '' END
            || CASE WHEN (before_cell_id IS NOT NULL AND before_caliber_id IS NULL) OR (after_cell_id IS NOT NULL AND after_caliber_id IS NULL)
                    THEN '; caliber unknown' ELSE '' END,
            3), '') AS note,
        before_convert_layouts AS cl_before, after_convert_layouts AS cl_after,
        before_elapsed_s AS elapsed_before, after_elapsed_s AS elapsed_after,
        strictest_same, environment_differs
    FROM verdict_inputs
)
SELECT
    roots.name AS root,
    judged.op,
    judged.dtype,
    judged.rule,
    judged.verdict,
    judged.recorded_verdict,
    judged.orig_verdict,
    -- a side several cells claim, or a copy's, has no values of its own
    CASE WHEN judged.verdict IS NOT 'DUPLICATE_CELL' THEN judged.cl_before END AS cl_before,
    CASE WHEN judged.verdict IS NOT 'DUPLICATE_CELL' THEN judged.cl_after END AS cl_after,
    CASE WHEN judged.verdict IS NOT 'DUPLICATE_CELL' THEN judged.fp_before END AS fp_before,
    CASE WHEN judged.verdict IS NOT 'DUPLICATE_CELL' THEN judged.fp_after END AS fp_after,
    CASE WHEN judged.verdict IS NOT 'DUPLICATE_CELL' THEN judged.elapsed_before END AS elapsed_before,
    CASE WHEN judged.verdict IS NOT 'DUPLICATE_CELL' THEN judged.elapsed_after END AS elapsed_after,
    CASE WHEN judged.verdict IS NOT 'DUPLICATE_CELL' THEN judged.rc_before END AS rc_before,
    CASE WHEN judged.verdict IS NOT 'DUPLICATE_CELL' THEN judged.rc_after END AS rc_after,
    calibers.backend, calibers.bench_level, calibers.cudagraph, calibers.isolate_tuner_cache, calibers.direct_repeat, calibers.shape_mode, calibers.flagtune,
    CASE WHEN kinds.range_label IS NOT NULL THEN coalesce(ranges.n_rows, 0) END AS n_rows,
    CASE WHEN kinds.range_label IS NOT NULL THEN ranges.min END AS min,
    CASE WHEN kinds.range_label IS NOT NULL THEN ranges.median END AS median,
    CASE WHEN kinds.range_label IS NOT NULL THEN ranges.max END AS max,
    kinds.range_label,
    CASE WHEN kinds.range_label IS NOT NULL THEN coalesce(ranges.fallback, 0) END AS fallback,
    judged.note,
    CASE WHEN judged.verdict = 'IR_CHANGED' AND judged.strictest_same
         THEN rules.strictest_hint END AS hint,
    -- a side without a cell is not a dtype without rows: say which it is
    CASE WHEN judged.verdict = 'NO_ROWS' AND (judged.before_cell_id IS NULL) <> (judged.after_cell_id IS NULL)
         THEN 'nothing: ' || 'MISSING_SIDE' || ', one side has no stored cell (the run stopped before it, '
              || 'or its directory is gone or was not ingested): run it, or ingest it'
         ELSE kinds.licenses END AS licenses,
    kinds.position AS verdict_position,
    roots.path AS root_path,
    judged.caliber_id,
    judged.before_cell_id,
    judged.after_cell_id,
    judged.root_id,
    -- field -> its values where the pair's two cells ran on different things (environment_differences)
    judged.environment_differs
FROM judged
JOIN roots ON roots.id = judged.root_id
JOIN fingerprint_rules rules ON rules.rule = judged.rule
LEFT JOIN verdict_kinds kinds ON kinds.verdict = judged.verdict
LEFT JOIN calibers ON calibers.id = judged.caliber_id
LEFT JOIN ab_round_ranges ranges
    ON ranges.before_cell_id = judged.before_cell_id AND ranges.after_cell_id = judged.after_cell_id;

-- The screening pairs with a cell on one side only (names.MISSING_SIDE's
-- case in a screening root): the run stopped before the other side, or its
-- directory is gone or was not ingested. Their verdict is NO_ROWS, and not
-- for the dtype; `zlstore problems` and the ingest name each, with the path
-- the missing cell would have.
CREATE VIEW missing_sides AS
SELECT
    roots.name AS root,
    v.op,
    v.dtype,
    CASE WHEN v.before_cell_id IS NULL THEN 'before' ELSE 'after' END AS missing,
    c.path AS present_cell,
    c.relpath AS present_relpath,
    v.root_id
FROM screen_pair_rows v  -- kept by the writers (screenpairs.py)
JOIN roots ON roots.id = v.root_id
JOIN cells c ON c.id = coalesce(v.before_cell_id, v.after_cell_id)
WHERE (v.before_cell_id IS NULL) <> (v.after_cell_id IS NULL);

-- The screening verdicts under the current rule (settings 'current_rule',
-- default v3: switching it is instant). Same columns and meaning as
-- verdicts_by_rule; this is the table `zlstore screen` prints.
CREATE VIEW verdicts AS
SELECT * FROM verdicts_by_rule
WHERE rule = (SELECT current_rule FROM judging_settings);

-- Per (row op, row dtype, shape, caliber, machine): how far one
-- measurement of that operator and shape wanders on that machine (the GPU
-- model, driver and runtime: environment_machines): floor = max |ratio - 1|
-- over the paired rows of the NO_IR_DIFF pairs under the current rule (the
-- same code measured twice) of every screening root that ran there, n =
-- the rows it rests on, roots = those screening roots (n_roots of them).
-- Where the machine is unknown (gpu NULL) a floor is one screening root's:
-- it serves only the campaigns that name that root their SCREEN_ROOT. A
-- noise floor, never a result: a campaign's range means something only
-- where it clears the floor of its shape (ab_ranges' noise_floor: the one
-- that applies to it, ../shared/ARTIFACTS.md, Noise floors).
CREATE VIEW noise_floors AS
WITH pooled AS (
    SELECT f.op, f.dtype, f.shape, f.caliber_id, f.machine,
           sum(f.n) AS n, max(f.floor) AS floor, sum(f.fallback_rows) AS fallback_rows,
           count(*) AS n_roots, group_concat(f.name, ',') AS roots, f.rule
    FROM (SELECT o.*, roots.name FROM noise_floor_rows o JOIN roots ON roots.id = o.root_id
          WHERE o.rule = (SELECT current_rule FROM judging_settings)
          ORDER BY roots.name) f  -- the roots named in the same order in every store
    GROUP BY f.op, f.dtype, f.shape, f.caliber_id, f.machine, CASE WHEN f.machine IS NULL THEN f.root_id END
)
SELECT
    p.op,
    p.dtype,
    p.shape,
    calibers.backend, calibers.bench_level, calibers.cudagraph, calibers.isolate_tuner_cache, calibers.direct_repeat, calibers.shape_mode, calibers.flagtune,
    json_extract(p.machine, '$[0]') AS gpu,
    json_extract(p.machine, '$[1]') AS driver,
    json_extract(p.machine, '$[2]') AS runtime,
    p.n,
    p.floor,
    p.roots,
    p.n_roots,
    (SELECT range_label FROM verdict_kinds WHERE verdict = 'NO_IR_DIFF') AS label,
    p.fallback_rows,
    p.rule,
    p.caliber_id,
    p.machine
FROM pooled p
JOIN calibers ON calibers.id = p.caliber_id;

-- Per screening root: is the switch's axis live? A switch that changes no
-- IR anywhere still gives a full table of NO_IR_DIFF (the seed: "confirm
-- the axis is live before reusing either"). pairs, ir_changed and
-- truncated under the current rule; ir_changed_strictest and
-- no_ir_diff_strictest under the strictest rule (judging_settings);
-- unmeasured: pairs with a side missing or without counted rows, or not
-- judged. axis: 'live' when some pair is IR_CHANGED under the strictest
-- rule; 'dead' when every pair was measured on both sides, none was
-- TRUNCATED, at least one is NO_IR_DIFF and none IR_CHANGED under the
-- strictest rule; 'unknown' otherwise (a TRUNCATED pair may hide the one
-- that changes).
CREATE VIEW screen_roots AS
WITH settings_now AS MATERIALIZED (SELECT current_rule, strictest_rule FROM judging_settings),
-- per screening root with pairs, its counts, each from its own pairs: a
-- correlated subquery, not a GROUP BY over every root's, so that a
-- reader's filter on the root (root = NAME, root_id = ID, root_switches'
-- lookup of one root's axis) reads one root's pairs by index
counts AS (
    SELECT roots.id AS root_id, roots.name AS root,
           (SELECT count(*) FROM verdicts_by_rule v
            WHERE v.root_id = roots.id AND v.rule = s.current_rule) AS pairs,
           (SELECT count(*) FROM verdicts_by_rule v
            WHERE v.root_id = roots.id AND v.rule = s.current_rule
              AND v.verdict = 'IR_CHANGED') AS ir_changed,
           (SELECT count(*) FROM verdicts_by_rule v
            WHERE v.root_id = roots.id AND v.rule = s.current_rule
              AND v.verdict = 'TRUNCATED') AS truncated,
           (SELECT count(*) FROM verdicts_by_rule v
            WHERE v.root_id = roots.id AND v.rule = s.strictest_rule
              AND v.verdict = 'IR_CHANGED') AS ir_changed_strictest,
           (SELECT count(*) FROM verdicts_by_rule v
            WHERE v.root_id = roots.id AND v.rule = s.strictest_rule
              AND v.verdict = 'NO_IR_DIFF') AS no_ir_diff_strictest,
           (SELECT count(*) FROM verdicts_by_rule v
            WHERE v.root_id = roots.id AND v.rule = s.strictest_rule AND (v.verdict IS NULL OR v.verdict NOT IN (
               'IR_CHANGED', 'NO_IR_DIFF', 'NO_TRITON'))) AS unmeasured
    FROM roots CROSS JOIN settings_now s
    WHERE roots.kind = 'screen' AND EXISTS (SELECT 1 FROM screen_pair_rows p WHERE p.root_id = roots.id)
)
SELECT
    counts.root,
    roots.switch,
    counts.pairs,
    counts.ir_changed,
    counts.ir_changed_strictest,
    counts.no_ir_diff_strictest,
    counts.truncated,
    counts.unmeasured,
    CASE
        WHEN counts.ir_changed_strictest > 0 THEN 'live'
        WHEN counts.truncated = 0 AND counts.unmeasured = 0 AND counts.no_ir_diff_strictest > 0 THEN 'dead'
        ELSE 'unknown'
    END AS axis,
    s.current_rule AS rule,
    s.strictest_rule,
    roots.path AS root_path,
    counts.root_id
FROM counts
JOIN roots ON roots.id = counts.root_id
CROSS JOIN settings_now s;

-- Per (root, row op, dtype, shape, caliber) of every repeat run and
-- campaign: what its paired rounds say about the switch. A screening
-- root's ranges are in verdicts (one round: never a result).
--   effect: the geometric mean of the rounds' ratios (before / after,
--     above 1: faster with the switch); ci_low .. ci_high its 95% interval;
--     p_value the two-sided t-test of the mean log ratio against 0 (the
--     rounds are paired: before and after ran back to back); q_value the
--     p-value adjusted by Benjamini-Hochberg over every tested range of
--     the root (zlstore/stats.py and zlstore/store/pairing.py compute them).
--   finding (finding_kinds): 'faster' / 'slower' when q_value <= q_max and
--     the whole interval lies beyond the minimum effect (above 1 +
--     min_effect, below 1 / (1 + min_effect)); 'no change' when the whole
--     interval lies within those bounds; 'too few rounds' under
--     min_rounds; 'inconclusive' otherwise, with to_settle saying what
--     would settle it (judging_settings holds q_max and min_effect).
--   min, median, max: the range of the ratio over the paired rounds.
--   latency_before, latency_after: each side's latency in the benchmark's
--     unit (ms), the median over the paired rounds (a round's the mean of
--     its rows of the shape): what the effect is the ratio of.
--   noise_floor: the floor of the range's shape under its caliber on its
--     machine (noise_floors; from its own screening root and the roots of
--     its own known machine, never another's: ../shared/ARTIFACTS.md,
--     Noise floors), printed beside the range, resting on floor_rows
--     paired rows of the screening roots floor_roots; clears_floor = 1
--     when the whole range lies outside 1 +- floor (NULL when no floor is
--     known, floor_note says why). It does not decide the finding.
--   rejected counts the rows of the key that did not pair (ab_rejected),
--     so an incomplete pairing never looks complete; a key with no pair at
--     all is listed with rounds 0. fallback = 1: a paired row was timed by
--     the direct fallback (a different regime).
CREATE VIEW ab_ranges AS
WITH differs AS MATERIALIZED (  -- once per query, not once per range
    SELECT root_id, op, dtype, json_group_object(field, json("values")) AS environment_differs
    FROM range_environment_differences
    GROUP BY root_id, op, dtype
)
SELECT
    j.root, j.op, j.dtype, j.shape, j.rounds,
    j.effect, j.ci_low, j.ci_high, j.p_value,
    j.q_value, j.finding, j.finding_position, j.to_settle,
    j.noise_floor, j.clears_floor, j.floor_note, j.floor_rows, j.floor_roots, j.q_max, j.min_effect,
    j.min, j.median, j.max, j.latency_before, j.latency_after,
    j.fallback, j.fallback_rows, j.rejected, j.rejected_reasons,
    j.log_mean, j.log_sd,
    j.cards, j.root_kind, j.caliber_id,
    calibers.backend, calibers.bench_level, calibers.cudagraph, calibers.isolate_tuner_cache, calibers.direct_repeat, calibers.shape_mode, calibers.flagtune,
    j.root_id,
    -- an until-decided campaign (stopping): the round the range's op
    -- stopped after and why (op_stops); its ranges are judged by the
    -- anytime-valid rule (zlstore/stats.py)
    j.stopping, j.stop_round, j.stop_reason,
    j.root_path,
    -- field -> its values where the range's cells ran on different things (range_environment_differences)
    differs.environment_differs
FROM ab_range_judgements j
LEFT JOIN calibers ON calibers.id = j.caliber_id
LEFT JOIN differs ON differs.root_id = j.root_id AND differs.op IS j.op AND differs.dtype IS j.dtype;

-- Per rule, its noise floors spelled out (NULL: none), the part of
-- judging_basis that says the floors: every noise_floor_rows row of the
-- rule in a fixed order. floors.py stores it (noise_floor_texts).
CREATE VIEW noise_floor_texts_now AS
SELECT
    r.rule,
    (SELECT group_concat(floor_text, ';') FROM (
        SELECT root_id || ',' || quote(op) || ',' || quote(dtype) || ',' || quote(shape) || ',' || caliber_id
               || ',' || quote(machine) || ',' || n || ',' || quote(floor) AS floor_text
        FROM noise_floor_rows o WHERE o.rule = r.rule
        ORDER BY root_id, op, dtype, shape, caliber_id)) AS text
FROM fingerprint_rules r;

-- What a range's judgement rests on beyond its own row: the settings
-- (judging_settings), this release's schema (its findings' SQL), the
-- current rule's noise floors and each campaign's screening root; the basis the stored judgements were made
-- on; and whether that is today's (current = 1). A stored judgement made
-- under another basis is not read (ab_range_judgements judges the row
-- again).
CREATE VIEW judging_basis AS
WITH now AS MATERIALIZED (
    SELECT
        s.current_rule || '|' || s.q_max || '|' || s.min_effect || '|' || s.min_rounds
        || '|' || coalesce((SELECT value FROM settings WHERE key = 'schema_hash'), '')
        -- the current rule's floors, as the writers spelled them, else spelled now
        || '|' || coalesce(
            (SELECT text FROM noise_floor_texts WHERE rule = s.current_rule),
            (SELECT text FROM noise_floor_texts_now WHERE rule = s.current_rule), '')
        || '|' || coalesce((  -- which screening root is each campaign's own
            SELECT group_concat(own, ';') FROM (
                SELECT root_id || '>' || screen_root_id AS own FROM root_screens
                WHERE screen_root_id IS NOT NULL ORDER BY root_id)), '') AS basis,
        (SELECT basis FROM ab_judgement_basis WHERE id = 1) AS stored_basis
    FROM judging_settings s
)
SELECT basis, stored_basis, basis IS stored_basis AS current FROM now;

-- The ranges of ab_range_rows whose stored judgement cannot be read (none
-- yet, or made under another basis), judged now: the finding, what would
-- settle it, the noise floor beside it, and the JSON text of the row,
-- joined from the fragments kept with it, so that `zlstore ab --json`
-- prints a campaign's thousands of ranges without a Python object per
-- value. zlstore stores what this gives before it commits (pairing.py); a
-- read by hand between the two sees the same.
CREATE VIEW ab_range_unjudged AS
WITH basis AS MATERIALIZED (
    SELECT current FROM judging_basis
),
differs AS MATERIALIZED (  -- what the cells behind a range differ in besides the switch: few or none
    SELECT root_id, op, dtype, json_group_object(field, json("values")) AS environment_differs
    FROM range_environment_differences
    GROUP BY root_id, op, dtype
),
thresholds AS MATERIALIZED (
    SELECT q_max, min_effect, min_rounds,
           ', "q_max": ' || json_quote(q_max) || ', "min_effect": ' || json_quote(min_effect) AS thresholds_json
    FROM judging_settings
),
kinds AS MATERIALIZED (
    SELECT position, finding,
           ', "finding": ' || json_quote(finding) || ', "finding_position": ' || position AS finding_json
    FROM finding_kinds
),
-- The ranges to judge, and what each root of theirs may be judged beside
-- (../shared/ARTIFACTS.md, Noise floors): the machine its cells ran on
-- (root_machines) and its own screening root (root_screens).
unjudged AS MATERIALIZED (  -- two arms, so that the usual case, no range and a current basis, reads one index entry
    SELECT rowid AS range_rowid FROM ab_range_rows WHERE judged IS NULL AND (SELECT current FROM basis)
    UNION ALL
    SELECT rowid FROM ab_range_rows WHERE NOT (SELECT current FROM basis)
),
judged_roots AS MATERIALIZED (
    SELECT ids.root_id, (SELECT machine FROM root_machines m WHERE m.root_id = ids.root_id) AS machine,
           (SELECT screen_root_id FROM root_screens o WHERE o.root_id = ids.root_id) AS screen_root_id
    FROM (SELECT DISTINCT r.root_id FROM unjudged CROSS JOIN ab_range_rows r ON r.rowid = unjudged.range_rowid) ids
),
-- Which screening roots' floors, of which machine, a judged root's ranges
-- are read beside: those of its own known machine, and its own screening
-- root's unless that ran on another known machine. Never another
-- machine's, nor an unknown one but its own screening root's.
floor_sources AS MATERIALIZED (
    SELECT DISTINCT j.root_id, f.root_id AS source_root_id, f.machine
    FROM judged_roots j
    CROSS JOIN (SELECT DISTINCT root_id, machine FROM noise_floor_rows
                WHERE rule = (SELECT current_rule FROM judging_settings)) f
    WHERE f.machine = j.machine
       OR (f.root_id = j.screen_root_id AND (f.machine IS NULL OR j.machine IS NULL OR f.machine = j.machine))
),
-- A range's floor: its shape's under its caliber, over those sources, with
-- the rows and the screening roots (by name, in order) it rests on.
range_floors AS MATERIALIZED (
    SELECT range_rowid, max(floor) AS floor, sum(n) AS n, group_concat(name, ',') AS roots
    FROM (
        SELECT unjudged.range_rowid, f.floor, f.n, roots.name
        FROM unjudged
        CROSS JOIN ab_range_rows r ON r.rowid = unjudged.range_rowid
        CROSS JOIN noise_floor_rows f
            ON f.rule = (SELECT current_rule FROM judging_settings)
           AND f.op IS r.op AND f.dtype IS r.dtype AND f.shape = r.shape AND f.caliber_id = r.caliber_id
        JOIN floor_sources src
            ON src.root_id = r.root_id AND src.source_root_id = f.root_id AND src.machine IS f.machine
        JOIN roots ON roots.id = f.root_id
        ORDER BY unjudged.range_rowid, roots.name
    )
    GROUP BY range_rowid
),
-- The row the finding's CASE reads (names.FINDING_INPUTS): a range to
-- judge, with the thresholds beside it. rounds: its paired rounds; ci_low,
-- ci_high: its effect's 95% interval (NULL under min_rounds); q_value: its
-- p-value adjusted over the root's tested ranges; q_max: the
-- false-discovery rate a finding is held to; min_effect: the smallest
-- change worth a finding, as a fraction; min_rounds: fewer paired rounds
-- get no test. Beside them, what the judgement shows with the finding:
-- the noise floor of the range's shape and caliber on its machine, and
-- whether the range clears it.
finding_inputs AS NOT MATERIALIZED (  -- read where judged reads it, not copied first
    SELECT
        r.rounds, r.ci_low, r.ci_high, r.q_value,
        t.q_max, t.min_effect, t.min_rounds,
        r.rowid AS range_rowid, r.root_id, r.op, r.dtype, r.caliber_id, r.log_mean, r.log_sd,
        t.thresholds_json,
        floors.floor AS noise_floor,
        floors.n AS floor_rows,
        floors.roots AS floor_roots,
        CASE WHEN floors.floor IS NOT NULL THEN (r.min > 1 + floors.floor OR r.max < 1 - floors.floor) END AS clears_floor
    FROM unjudged
    CROSS JOIN ab_range_rows r ON r.rowid = unjudged.range_rowid
    CROSS JOIN thresholds t
    LEFT JOIN range_floors floors ON floors.range_rowid = unjudged.range_rowid
),
judged AS (
    SELECT
        range_rowid, root_id, op, dtype, caliber_id, rounds, log_mean, log_sd, min_effect, min_rounds, thresholds_json,
        CASE
            WHEN q_value <= q_max AND ci_low > 1 + min_effect THEN 'faster'
            WHEN q_value <= q_max AND ci_high < 1 / (1 + min_effect) THEN 'slower'
            WHEN ci_low > 1 / (1 + min_effect) AND ci_high < 1 + min_effect THEN 'no change'
            WHEN rounds < min_rounds THEN 'too few rounds'
            ELSE 'inconclusive'
        END AS finding,
        noise_floor, floor_rows, floor_roots, clears_floor
    FROM finding_inputs
),
-- Why a range has no noise floor beside it: the same for every shape of
-- an op and dtype of a root under one caliber, so said once per such key.
-- Only the floors the root may be judged beside (floor_sources) are named.
notes AS MATERIALIZED (
    SELECT
        lacking.root_id, lacking.op, lacking.dtype, lacking.caliber_id,
        CASE
            WHEN jr.machine IS NULL AND jr.screen_root_id IS NULL
                THEN 'none: its machine is unknown (no ENV_GPU) and no screening root of its own (SCREEN_ROOT) is stored'
            WHEN NOT EXISTS (SELECT 1 FROM noise_floor_rows o
                             JOIN floor_sources src
                                 ON src.root_id = lacking.root_id AND src.source_root_id = o.root_id
                                AND src.machine IS o.machine
                             WHERE o.rule = (SELECT current_rule FROM judging_settings)
                               AND o.op IS lacking.op AND o.dtype IS lacking.dtype)
                THEN 'none: no screened pair of the op on its machine kept its IR (NO_IR_DIFF) to measure its noise'
            WHEN EXISTS (SELECT 1 FROM noise_floor_rows o
                         JOIN floor_sources src
                             ON src.root_id = lacking.root_id AND src.source_root_id = o.root_id
                            AND src.machine IS o.machine
                         WHERE o.rule = (SELECT current_rule FROM judging_settings)
                           AND o.op IS lacking.op AND o.dtype IS lacking.dtype AND o.caliber_id = lacking.caliber_id)
                THEN 'none for this shape (its machine''s NO_IR_DIFF pairs of this op measured others)'
            ELSE (
            SELECT 'none under this caliber; ' || group_concat(other, '; ')
            FROM (
                SELECT printf('%.4g where ', max(o.floor)) || substr(
                    CASE WHEN oc.backend IS NOT rc.backend THEN ', backend=' || coalesce(oc.backend, '?') ELSE '' END || CASE WHEN oc.bench_level IS NOT rc.bench_level THEN ', bench_level=' || coalesce(oc.bench_level, '?') ELSE '' END || CASE WHEN oc.cudagraph IS NOT rc.cudagraph THEN ', cudagraph=' || coalesce(oc.cudagraph, '?') ELSE '' END || CASE WHEN oc.isolate_tuner_cache IS NOT rc.isolate_tuner_cache THEN ', isolate_tuner_cache=' || coalesce(oc.isolate_tuner_cache, '?') ELSE '' END || CASE WHEN oc.direct_repeat IS NOT rc.direct_repeat THEN ', direct_repeat=' || coalesce(oc.direct_repeat, '?') ELSE '' END || CASE WHEN oc.shape_mode IS NOT rc.shape_mode THEN ', shape_mode=' || coalesce(oc.shape_mode, '?') ELSE '' END || CASE WHEN oc.flagtune IS NOT rc.flagtune THEN ', flagtune=' || coalesce(oc.flagtune, '?') ELSE '' END,
                    3) AS other
                FROM noise_floor_rows o
                JOIN floor_sources src
                    ON src.root_id = lacking.root_id AND src.source_root_id = o.root_id AND src.machine IS o.machine
                JOIN calibers oc ON oc.id = o.caliber_id
                JOIN calibers rc ON rc.id = lacking.caliber_id
                WHERE o.rule = (SELECT current_rule FROM judging_settings)
                  AND o.op IS lacking.op AND o.dtype IS lacking.dtype
                GROUP BY o.caliber_id
                ORDER BY other  -- the same text in every store, whatever its caliber ids
            )) END AS floor_note
    FROM (SELECT DISTINCT root_id, op, dtype, caliber_id FROM judged WHERE noise_floor IS NULL AND rounds > 0) lacking
    JOIN judged_roots jr ON jr.root_id = lacking.root_id
),
settled AS MATERIALIZED (
    SELECT
        judged.range_rowid,
        judged.finding,
        judged.noise_floor,
        judged.floor_rows,
        judged.floor_roots,
        judged.clears_floor,
        judged.thresholds_json,
        kinds.position AS finding_position,
        kinds.finding_json,
        -- An inconclusive range needs its interval's half-width, t sd /
        -- sqrt(n) on the log scale, to shrink below its distance from the
        -- nearer bound, ln(1 + min_effect): n = (t sd / distance)^2, with
        -- the t quantile approximated from its normal one (1.96 + 2.37 / df
        -- + 2.82 / df^2; within 4% from 3 degrees of freedom). A lower
        -- bound: q_value must also pass. More than 30 rounds is not a
        -- plan: the card is too noisy for an effect this close to the bound.
        CASE judged.finding
            WHEN 'too few rounds'
                THEN 'at least ' || judged.min_rounds || ' paired rounds (' || judged.rounds || ' so far)'
            WHEN 'inconclusive' THEN (
                SELECT CASE
                    WHEN judged.log_sd IS NULL THEN 'no test: a ratio of the rounds is not a finite number'
                    WHEN judged.log_sd = 0
                        THEN 'the rounds agree exactly, at the minimum effect: more rounds would not settle it'
                    -- the cause a reader can see: a round timed only a few
                    -- times (direct_repeat, a caliber field) varies with each
                    -- timing; otherwise the card itself is noisy
                    WHEN (needed IS NULL OR needed > 30)
                         AND CAST((SELECT c.direct_repeat FROM calibers c WHERE c.id = judged.caliber_id) AS INTEGER)
                             BETWEEN 1 AND 9
                        THEN 'steadier rounds: a round varies by about '
                             || printf('%.1f%%', 100 * (exp(judged.log_sd) - 1))
                             || ', each timed only ' || (SELECT c.direct_repeat FROM calibers c WHERE c.id = judged.caliber_id)
                             || 'x (direct_repeat): a larger ZL_DIRECT_REPEAT, more than 30 rounds otherwise'
                    WHEN needed IS NULL OR needed > 30
                        THEN 'a quieter card: a round varies by about '
                             || printf('%.1f%%', 100 * (exp(judged.log_sd) - 1))
                             || ', too much for 30 rounds to settle'
                    ELSE 'more rounds: at least ' || max(needed, judged.rounds + 1) || ' in all'
                         -- counted with today's t quantile: the interval of an until-decided
                         -- campaign (valid after every round) is wider, so a lower bound there
                         || CASE WHEN (SELECT roots.stopping FROM ab_range_rows x JOIN roots ON roots.id = x.root_id
                                       WHERE x.rowid = judged.range_rowid) = 'until-decided'
                                 THEN ' (more under the anytime-valid interval)' ELSE '' END
                END
                FROM (SELECT CAST(ceil(
                          ((1.96 + 2.37 / df + 2.82 / (df * df)) * spread) * ((1.96 + 2.37 / df + 2.82 / (df * df)) * spread))
                        AS INTEGER) AS needed
                      FROM (SELECT spread, max(2.0, (1.96 * spread) * (1.96 * spread) - 1) AS df
                            FROM (SELECT judged.log_sd
                                         / nullif(abs(abs(judged.log_mean) - ln(1 + judged.min_effect)), 0) AS spread))))
        END AS to_settle,
        notes.floor_note
    FROM judged
    LEFT JOIN kinds ON kinds.finding = judged.finding
    LEFT JOIN notes ON judged.noise_floor IS NULL AND judged.rounds > 0 AND notes.root_id = judged.root_id
         AND notes.op IS judged.op AND notes.dtype IS judged.dtype AND notes.caliber_id = judged.caliber_id
)
SELECT
    settled.range_rowid,
    r.root_id, r.op, r.dtype, r.shape, r.caliber_id, r.rounds, r.min, r.median, r.max, r.latency_before, r.latency_after, r.fallback, r.fallback_rows, r.cards, r.rejected, r.rejected_reasons, r.log_mean, r.log_sd, r.effect, r.ci_low, r.ci_high, r.p_value, r.q_value, r.json_head, r.json_tail, r.stop_round, r.stop_reason,
    settled.finding, settled.finding_position, settled.to_settle, settled.noise_floor, settled.clears_floor,
    settled.floor_note, settled.floor_rows, settled.floor_roots,
    -- the judged members between the kept ones, written as the fragments
    -- are (pairing.py: json.dumps' '"key": value, ' layout, as every
    -- --json prints its rows); what is the same for many rows (a finding,
    -- the thresholds) is written once above, and clears_floor (0, 1 or
    -- NULL) needs no json_quote: as fast as one json_object
    '{' || r.json_head || ', "q_value": ' || json_quote(r.q_value) || settled.finding_json
        || ', "to_settle": ' || json_quote(settled.to_settle)
        || ', "noise_floor": ' || json_quote(settled.noise_floor)
        || ', "clears_floor": ' || coalesce(settled.clears_floor, 'null')
        || ', "floor_note": ' || json_quote(settled.floor_note)
        || ', "floor_rows": ' || json_quote(settled.floor_rows)
        || ', "floor_roots": ' || json_quote(settled.floor_roots)
        || settled.thresholds_json || ', ' || r.json_tail
        || ', "root_path": ' || json_quote(roots.path)
        || ', "environment_differs": ' || coalesce(differs.environment_differs, 'null') || '}' AS json
FROM settled
CROSS JOIN ab_range_rows r ON r.rowid = settled.range_rowid
JOIN roots ON roots.id = r.root_id
LEFT JOIN differs ON differs.root_id = r.root_id AND differs.op IS r.op AND differs.dtype IS r.dtype;

-- ab_ranges' rows judged under the current settings: the judgement stored
-- with each range where it was made under today's basis (judging_basis),
-- else judged now (ab_range_unjudged), and the JSON text `zlstore ab
-- --json` prints for it.
CREATE VIEW ab_range_judgements AS
WITH thresholds AS MATERIALIZED (
    SELECT q_max, min_effect FROM judging_settings
)
SELECT
    r.rowid AS range_rowid, r.root_id, r.op, r.dtype, r.shape, r.caliber_id, r.rounds, r.min, r.median, r.max, r.latency_before, r.latency_after, r.fallback, r.fallback_rows, r.cards, r.rejected, r.rejected_reasons, r.log_mean, r.log_sd, r.effect, r.ci_low, r.ci_high, r.p_value, r.q_value, r.json_head, r.json_tail, r.stop_round, r.stop_reason,
    r.finding, r.finding_position, r.to_settle, r.noise_floor, r.clears_floor, r.floor_note,
    r.floor_rows, r.floor_roots,
    roots.name AS root, roots.kind AS root_kind, roots.path AS root_path, t.q_max, t.min_effect,
    roots.stopping, j.json
FROM ab_range_rows r
JOIN roots ON roots.id = r.root_id AND roots.kind <> 'screen'
JOIN ab_range_json j ON j.range_rowid = r.rowid
CROSS JOIN thresholds t
WHERE r.judged IS NOT NULL AND (SELECT current FROM judging_basis)
UNION ALL
SELECT
    u.range_rowid, u.root_id, u.op, u.dtype, u.shape, u.caliber_id, u.rounds, u.min, u.median, u.max, u.latency_before, u.latency_after, u.fallback, u.fallback_rows, u.cards, u.rejected, u.rejected_reasons, u.log_mean, u.log_sd, u.effect, u.ci_low, u.ci_high, u.p_value, u.q_value, u.json_head, u.json_tail, u.stop_round, u.stop_reason,
    u.finding, u.finding_position, u.to_settle, u.noise_floor, u.clears_floor, u.floor_note,
    u.floor_rows, u.floor_roots,
    roots.name, roots.kind, roots.path, t.q_max, t.min_effect,
    roots.stopping, u.json
FROM ab_range_unjudged u
JOIN roots ON roots.id = u.root_id AND roots.kind <> 'screen'
CROSS JOIN thresholds t;

-- When a root ran: its env file's STARTED_AT, else its first cell's, else
-- when it was ingested. The order `zlstore history` reads roots in.
CREATE VIEW root_times AS
SELECT
    roots.id AS root_id,
    roots.name AS root,
    roots.kind,
    coalesce(nullif(roots.started_at, ''),
             (SELECT min(started_at) FROM cells WHERE cells.root_id = roots.id AND started_at <> ''),
             roots.ingested_at) AS started_at
FROM roots;

-- What each root tested: its switch (the env file's SWITCH, else its
-- cells'), the value the switch had before and after (its cells'
-- SWITCH_VALUE, else the env file's SWITCH_VALUES), and whether its axis is
-- dead: an A/A run (one value on both sides; cells that recorded several
-- values give them ' | '-joined), a screening root whose
-- switch changed no IR (screen_roots' axis), or a campaign whose own
-- screening root is one. Two roots' results are comparable only with the
-- same switch and values (../shared/ARTIFACTS.md, Across roots); a dead
-- axis is never part of a switch's history.
CREATE VIEW root_switches AS
WITH named AS (
    SELECT
        r.id AS root_id,
        r.name AS root,
        r.kind,
        coalesce(nullif(r.switch, ''), (
            SELECT switch FROM cells WHERE root_id = r.id AND switch <> ''
            GROUP BY switch ORDER BY count(*) DESC, switch LIMIT 1)) AS switch,
        coalesce((
            SELECT group_concat(switch_value, ' | ') FROM (
                SELECT DISTINCT switch_value FROM cells
                WHERE root_id = r.id AND side = 'before' AND switch_value IS NOT NULL ORDER BY switch_value)),
            nullif(substr(json_extract(r.env, '$.SWITCH_VALUES'), 1,
                          instr(json_extract(r.env, '$.SWITCH_VALUES') || ',', ',') - 1), '')) AS before_value,
        coalesce((
            SELECT group_concat(switch_value, ' | ') FROM (
                SELECT DISTINCT switch_value FROM cells
                WHERE root_id = r.id AND side = 'after' AND switch_value IS NOT NULL ORDER BY switch_value)),
            nullif(substr(json_extract(r.env, '$.SWITCH_VALUES'),
                          instr(json_extract(r.env, '$.SWITCH_VALUES') || ',', ',') + 1), '')) AS after_value
    FROM roots r
)
SELECT
    n.root_id,
    n.root,
    n.kind,
    n.switch,
    n.before_value,
    n.after_value,
    CASE
        WHEN n.before_value IS NOT NULL AND n.before_value = n.after_value THEN 'dead'
        ELSE coalesce(
            -- a root's own pairs by index (screen_pair_rows), not every root's
            (SELECT axis FROM screen_roots a WHERE a.root_id = n.root_id),
            (SELECT a.axis FROM screen_roots a
             WHERE a.root_id = (SELECT o.screen_root_id FROM root_screens o WHERE o.root_id = n.root_id)),
            'unknown')
    END AS axis
FROM named n;

-- What a store holds: one row per root, newest first, with its switch and
-- the values each side ran it with (root_switches), when it ran (root_times), what its
-- current cells ran on (field -> its values, JSON; empty: they recorded
-- nothing), how many current cells it has and its open problems
-- (open_problems). `zlstore roots` prints it; a served store's front page
-- shows it first.
CREATE VIEW store_roots AS
SELECT
    roots.name AS root,
    roots.kind,
    w.switch,
    w.before_value AS switch_before,
    w.after_value AS switch_after,
    t.started_at,
    (SELECT json_group_object(field, json(field_values)) FROM (
        SELECT f.key AS field, json_group_array(DISTINCT f.value) AS field_values
        FROM (SELECT DISTINCT environment_id FROM cells c
              WHERE c.root_id = roots.id AND c.superseded_at IS NULL) d
        JOIN environments e ON e.id = d.environment_id
        JOIN json_each(json_object('gpu', e.gpu, 'gpu_count', e.gpu_count, 'devices', e.devices, 'driver', e.driver, 'runtime', e.runtime, 'torch', e.torch, 'triton', e.triton, 'triton_commit', e.triton_commit, 'flag_gems', e.flag_gems, 'flaggems_commit', e.flaggems_commit, 'python', e.python, 'hostname', e.hostname)) f
        WHERE f.value IS NOT NULL
        GROUP BY f.key)) AS environment,
    (SELECT coalesce(sum(c.superseded_at IS NULL), 0) FROM cells c WHERE c.root_id = roots.id) AS cells,
    (SELECT count(*) FROM ingest_problems p LEFT JOIN cells c ON c.id = p.cell_id
     WHERE p.closed_by IS NULL AND coalesce(p.root_id, c.root_id) = roots.id) AS open_problems,
    roots.host,
    roots.path AS root_path,
    roots.id AS root_id
FROM roots
JOIN root_times t ON t.root_id = roots.id
LEFT JOIN root_switches w ON w.root_id = roots.id;

-- One operator across every root that measured it, in time order: a
-- campaign's or repeat run's A/B range per shape (effect, interval,
-- finding) and a screening pair's verdict with its labelled range (the
-- noise floor for NO_IR_DIFF, indicative for IR_CHANGED: never a result),
-- with the switch its root tested, the switch's values and whether its
-- axis is dead (root_switches). `zlstore history` and the dashboard's
-- history chart read it: a series is one shape of one switch.
CREATE VIEW op_history AS
-- Each arm starts from its roots' switches and times (once per root:
-- DISTINCT keeps the subquery whole, and the reader's filter on the root
-- reaches it) and is a plain join, so that `root = ?` reads that root's
-- ranges or pairs by index. A campaign's ranges are read as ab_range_judgements reads them
-- (the judgement stored under today's basis, else judged now), not through
-- ab_ranges, whose columns op_history does not show cost the whole store.
SELECT
    w.started_at, w.root, w.kind, r.op, r.dtype, r.shape, r.rounds,
    r.effect, r.ci_low, r.ci_high, r.q_value, r.finding,
    NULL AS verdict, NULL AS range_label, r.min, r.median, r.max,
    r.caliber_id, r.root_id,
    w.switch, w.before_value, w.after_value, w.axis
FROM (SELECT DISTINCT s.*, t.started_at FROM root_switches s
      JOIN root_times t ON t.root_id = s.root_id WHERE s.kind <> 'screen') w
JOIN ab_range_rows r ON r.root_id = w.root_id
JOIN ab_range_json j ON j.range_rowid = r.rowid
WHERE r.judged IS NOT NULL AND (SELECT current FROM judging_basis)
UNION ALL
SELECT
    w.started_at, w.root, w.kind, u.op, u.dtype, u.shape, u.rounds,
    u.effect, u.ci_low, u.ci_high, u.q_value, u.finding,
    NULL, NULL, u.min, u.median, u.max,
    u.caliber_id, u.root_id,
    w.switch, w.before_value, w.after_value, w.axis
FROM ab_range_unjudged u  -- usually none: then no root's switch is looked up for it
CROSS JOIN (SELECT DISTINCT s.*, t.started_at FROM root_switches s
      JOIN root_times t ON t.root_id = s.root_id WHERE s.kind <> 'screen') w ON w.root_id = u.root_id
-- ab_range_unjudged's own test of which ranges it judges, asked first, so
-- that the usual store (every range judged under today's basis) does not
-- build its judging machinery at all
WHERE NOT (SELECT current FROM judging_basis) OR EXISTS (SELECT 1 FROM ab_range_rows WHERE judged IS NULL)
UNION ALL
SELECT
    w.started_at, w.root, 'screen', v.op, v.dtype, NULL, 1,
    NULL, NULL, NULL, NULL, NULL,
    v.verdict, v.range_label, v.min, v.median, v.max,
    v.caliber_id, v.root_id,
    w.switch, w.before_value, w.after_value, w.axis
-- screening pairs are a screening root's only (screenpairs.py)
FROM (SELECT DISTINCT s.*, t.started_at FROM root_switches s
      JOIN root_times t ON t.root_id = s.root_id WHERE s.kind = 'screen') w
JOIN verdicts v ON v.root = w.root;

-- ===== derive: the scratch tables (pairing.SETUP, ranges.SETUP, screenpairs.SETUP) =====
CREATE TEMP TABLE IF NOT EXISTS ab_rounds_now (root_id, card, repeat_dir, cell_op, cell_dtype, round, before_cell_id, after_cell_id, before_caliber_id, after_caliber_id, before_claims, after_claims, before_copies, after_copies);

CREATE TEMP TABLE IF NOT EXISTS ab_keys_now (root_id, op, dtype, shape);

CREATE TEMP TABLE IF NOT EXISTS ab_keys_unique (key_id INTEGER PRIMARY KEY, root_id, op, dtype, shape);

CREATE TEMP TABLE IF NOT EXISTS ab_judged_now (range_rowid INTEGER PRIMARY KEY, finding, finding_position, to_settle, noise_floor, clears_floor, floor_note, floor_rows, floor_roots, json);

DELETE FROM temp.ab_keys_unique;

CREATE TEMP TABLE IF NOT EXISTS screen_pairs_now (root_id, op, dtype);


-- ===== derive: the stale rounds' screening pairs marked, before pairing (screenpairs.MARK) =====
INSERT INTO screen_stale_pairs (root_id, op, dtype)
        SELECT DISTINCT s.root_id, s.cell_op, s.cell_dtype FROM ab_stale_rounds s
        WHERE NOT EXISTS (SELECT 1 FROM roots WHERE roots.id = s.root_id AND roots.kind <> 'screen')
           OR s.root_id IN (SELECT root_id FROM screen_pair_rows);


-- ===== derive: the stale rounds paired again (pairing.STEPS) =====
DELETE FROM temp.ab_rounds_now;

DELETE FROM temp.ab_keys_now;

INSERT INTO temp.ab_rounds_now (root_id, card, repeat_dir, cell_op, cell_dtype, round)
       SELECT DISTINCT root_id, card, repeat_dir, cell_op, cell_dtype, round FROM ab_stale_rounds;

UPDATE temp.ab_rounds_now SET
        (before_cell_id, before_claims) = (SELECT max(c.id) AS cell_id, count(*) AS claims FROM cells c
WHERE c.root_id = ab_rounds_now.root_id AND c.pair_card IS ab_rounds_now.card AND c.repeat_dir IS ab_rounds_now.repeat_dir AND c.op IS ab_rounds_now.cell_op AND c.dtype IS ab_rounds_now.cell_dtype AND c.round IS ab_rounds_now.round AND c.side = 'before' AND c.superseded_at IS NULL),
        (after_cell_id, after_claims) = (SELECT max(c.id) AS cell_id, count(*) AS claims FROM cells c
WHERE c.root_id = ab_rounds_now.root_id AND c.pair_card IS ab_rounds_now.card AND c.repeat_dir IS ab_rounds_now.repeat_dir AND c.op IS ab_rounds_now.cell_op AND c.dtype IS ab_rounds_now.cell_dtype AND c.round IS ab_rounds_now.round AND c.side = 'after' AND c.superseded_at IS NULL);

UPDATE temp.ab_rounds_now SET
        before_copies = (SELECT count(*) FROM cell_copies WHERE cell_id = ab_rounds_now.before_cell_id),
        after_copies = (SELECT count(*) FROM cell_copies WHERE cell_id = ab_rounds_now.after_cell_id);

DELETE FROM ab_duplicate_rounds WHERE rowid IN (
        SELECT d.rowid FROM temp.ab_rounds_now r CROSS JOIN ab_duplicate_rounds d ON d.root_id = r.root_id AND d.card IS r.card AND d.repeat_dir IS r.repeat_dir AND d.cell_op IS r.cell_op AND d.cell_dtype IS r.cell_dtype AND d.round IS r.round);

INSERT INTO ab_duplicate_rounds (root_id, card, repeat_dir, cell_op, cell_dtype, round, before_claims, after_claims, before_copies, after_copies)
        SELECT root_id, card, repeat_dir, cell_op, cell_dtype, round, before_claims, after_claims, before_copies, after_copies FROM temp.ab_rounds_now
        WHERE before_claims > 1 OR after_claims > 1 OR before_copies > 0 OR after_copies > 0;

UPDATE temp.ab_rounds_now SET
        before_caliber_id = (SELECT caliber_id FROM cells WHERE id = before_cell_id),
        after_caliber_id = (SELECT caliber_id FROM cells WHERE id = after_cell_id);

INSERT INTO temp.ab_keys_now
        SELECT s.root_id, s.op, s.dtype, s.shape
        FROM temp.ab_rounds_now r CROSS JOIN ab_slot_rows s ON s.root_id = r.root_id AND s.card IS r.card AND s.repeat_dir IS r.repeat_dir AND s.cell_op IS r.cell_op AND s.cell_dtype IS r.cell_dtype AND s.round IS r.round;

DELETE FROM ab_slot_rows WHERE rowid IN (
        SELECT s.rowid FROM temp.ab_rounds_now r CROSS JOIN ab_slot_rows s ON s.root_id = r.root_id AND s.card IS r.card AND s.repeat_dir IS r.repeat_dir AND s.cell_op IS r.cell_op AND s.cell_dtype IS r.cell_dtype AND s.round IS r.round);

INSERT INTO ab_slot_rows (
            root_id, card, repeat_dir, cell_op, cell_dtype, round, op, dtype, shape, occurrence,
            before_cell_id, after_cell_id, before_caliber_id, after_caliber_id,
            before_measurement_id, after_measurement_id, before_counted, after_counted,
            before_not_counted, after_not_counted, latency_before, latency_after,
            before_fallback, after_fallback, reason)
        WITH slots (round_id, op, dtype, shape, occurrence,
                    before_id, before_counted, before_not_counted, latency_before, before_fallback,
                    after_id, after_counted, after_not_counted, latency_after, after_fallback) AS (
            SELECT r.rowid, mb.op_name, mb.dtype, mb.shape, mb.occurrence,
                   mb.id, mb.counted, mb.not_counted_reason, mb.latency, mb.fallback,
                   ma.id, ma.counted, ma.not_counted_reason, ma.latency, ma.fallback
            FROM temp.ab_rounds_now r
            CROSS JOIN measurements mb ON mb.cell_id = r.before_cell_id
            LEFT JOIN measurements ma
                ON ma.cell_id = r.after_cell_id AND ma.op_name IS mb.op_name AND ma.dtype IS mb.dtype
               AND ma.shape = mb.shape AND ma.occurrence = mb.occurrence),
        -- The row the reason's CASE reads (names.REASON_INPUTS): a row
        -- identity of a round, both sides side by side; each before_X has
        -- its after_X. measurement_id: the side's row (NULL: it lacks it);
        -- counted: 1 where that row is a counted measurement; cell_id: the
        -- side's current cell in the round (NULL: none); caliber_id: that
        -- cell's caliber (NULL: unknown); claims: the current cells that
        -- claim the side (more than 1: a copy); copies: the other current
        -- cells that hold its cell's files (0: none). Beside them, the round
        -- and what the slot row keeps.
        reason_inputs AS (
            SELECT
                s.before_id AS before_measurement_id, s.after_id AS after_measurement_id,
                s.before_counted, s.after_counted,
                r.before_cell_id, r.after_cell_id, r.before_caliber_id, r.after_caliber_id,
                r.before_claims, r.after_claims, r.before_copies, r.after_copies,
                r.root_id, r.card, r.repeat_dir, r.cell_op, r.cell_dtype, r.round, s.op, s.dtype, s.shape, s.occurrence,
                s.before_not_counted, s.after_not_counted, s.latency_before, s.latency_after,
                s.before_fallback, s.after_fallback
            FROM slots s
            JOIN temp.ab_rounds_now r ON r.rowid = s.round_id
        )
        SELECT
            root_id, card, repeat_dir, cell_op, cell_dtype, round, op, dtype, shape, occurrence,
            before_cell_id, after_cell_id, before_caliber_id, after_caliber_id,
            before_measurement_id, after_measurement_id, before_counted, after_counted,
            before_not_counted, after_not_counted, latency_before, latency_after,
            before_fallback, after_fallback,
            CASE
                WHEN before_measurement_id IS NOT NULL AND after_measurement_id IS NOT NULL AND before_counted = 1 AND after_counted = 1 AND before_claims = 1 AND after_claims = 1 AND before_copies = 0 AND after_copies = 0 AND before_caliber_id = after_caliber_id THEN NULL
                WHEN before_claims > 1 OR after_claims > 1 OR before_copies > 0 OR after_copies > 0 THEN 'DUPLICATE_CELL'
                WHEN (before_cell_id IS NOT NULL AND before_caliber_id IS NULL) OR (after_cell_id IS NOT NULL AND after_caliber_id IS NULL) THEN 'CALIBER_UNKNOWN'
                WHEN before_caliber_id <> after_caliber_id THEN 'CALIBER_MISMATCH'
                WHEN before_measurement_id IS NULL OR after_measurement_id IS NULL THEN 'MISSING_SIDE'
                ELSE 'NOT_COUNTED'
            END
        FROM reason_inputs;

INSERT INTO ab_slot_rows (
            root_id, card, repeat_dir, cell_op, cell_dtype, round, op, dtype, shape, occurrence,
            before_cell_id, after_cell_id, before_caliber_id, after_caliber_id,
            before_measurement_id, after_measurement_id, before_counted, after_counted,
            before_not_counted, after_not_counted, latency_before, latency_after,
            before_fallback, after_fallback, reason)
        WITH slots (round_id, op, dtype, shape, occurrence,
                    before_id, before_counted, before_not_counted, latency_before, before_fallback,
                    after_id, after_counted, after_not_counted, latency_after, after_fallback) AS (
            SELECT r.rowid, ma.op_name, ma.dtype, ma.shape, ma.occurrence,
                   NULL, NULL, NULL, NULL, NULL,
                   ma.id, ma.counted, ma.not_counted_reason, ma.latency, ma.fallback
            FROM temp.ab_rounds_now r
            CROSS JOIN measurements ma ON ma.cell_id = r.after_cell_id
             AND (SELECT count(*) FROM measurements a WHERE a.cell_id = r.after_cell_id)
               > (SELECT count(DISTINCT p.after_measurement_id) FROM ab_slot_rows p
                  WHERE p.root_id = r.root_id AND p.card IS r.card AND p.repeat_dir IS r.repeat_dir AND p.cell_op IS r.cell_op AND p.cell_dtype IS r.cell_dtype AND p.round IS r.round)
            WHERE NOT EXISTS (
                SELECT 1 FROM measurements mb
                WHERE mb.cell_id = r.before_cell_id AND mb.op_name IS ma.op_name AND mb.dtype IS ma.dtype
                  AND mb.shape = ma.shape AND mb.occurrence = ma.occurrence)),
        -- The row the reason's CASE reads (names.REASON_INPUTS): a row
        -- identity of a round, both sides side by side; each before_X has
        -- its after_X. measurement_id: the side's row (NULL: it lacks it);
        -- counted: 1 where that row is a counted measurement; cell_id: the
        -- side's current cell in the round (NULL: none); caliber_id: that
        -- cell's caliber (NULL: unknown); claims: the current cells that
        -- claim the side (more than 1: a copy); copies: the other current
        -- cells that hold its cell's files (0: none). Beside them, the round
        -- and what the slot row keeps.
        reason_inputs AS (
            SELECT
                s.before_id AS before_measurement_id, s.after_id AS after_measurement_id,
                s.before_counted, s.after_counted,
                r.before_cell_id, r.after_cell_id, r.before_caliber_id, r.after_caliber_id,
                r.before_claims, r.after_claims, r.before_copies, r.after_copies,
                r.root_id, r.card, r.repeat_dir, r.cell_op, r.cell_dtype, r.round, s.op, s.dtype, s.shape, s.occurrence,
                s.before_not_counted, s.after_not_counted, s.latency_before, s.latency_after,
                s.before_fallback, s.after_fallback
            FROM slots s
            JOIN temp.ab_rounds_now r ON r.rowid = s.round_id
        )
        SELECT
            root_id, card, repeat_dir, cell_op, cell_dtype, round, op, dtype, shape, occurrence,
            before_cell_id, after_cell_id, before_caliber_id, after_caliber_id,
            before_measurement_id, after_measurement_id, before_counted, after_counted,
            before_not_counted, after_not_counted, latency_before, latency_after,
            before_fallback, after_fallback,
            CASE
                WHEN before_measurement_id IS NOT NULL AND after_measurement_id IS NOT NULL AND before_counted = 1 AND after_counted = 1 AND before_claims = 1 AND after_claims = 1 AND before_copies = 0 AND after_copies = 0 AND before_caliber_id = after_caliber_id THEN NULL
                WHEN before_claims > 1 OR after_claims > 1 OR before_copies > 0 OR after_copies > 0 THEN 'DUPLICATE_CELL'
                WHEN (before_cell_id IS NOT NULL AND before_caliber_id IS NULL) OR (after_cell_id IS NOT NULL AND after_caliber_id IS NULL) THEN 'CALIBER_UNKNOWN'
                WHEN before_caliber_id <> after_caliber_id THEN 'CALIBER_MISMATCH'
                WHEN before_measurement_id IS NULL OR after_measurement_id IS NULL THEN 'MISSING_SIDE'
                ELSE 'NOT_COUNTED'
            END
        FROM reason_inputs;

INSERT INTO temp.ab_keys_now
        SELECT s.root_id, s.op, s.dtype, s.shape
        FROM temp.ab_rounds_now r CROSS JOIN ab_slot_rows s ON s.root_id = r.root_id AND s.card IS r.card AND s.repeat_dir IS r.repeat_dir AND s.cell_op IS r.cell_op AND s.cell_dtype IS r.cell_dtype AND s.round IS r.round;

DELETE FROM ab_round_ranges WHERE rowid IN (
        SELECT g.rowid FROM temp.ab_rounds_now r CROSS JOIN ab_round_ranges g ON g.root_id = r.root_id AND g.card IS r.card AND g.repeat_dir IS r.repeat_dir AND g.cell_op IS r.cell_op AND g.cell_dtype IS r.cell_dtype AND g.round IS r.round);

INSERT INTO ab_round_ranges (
            root_id, card, repeat_dir, cell_op, cell_dtype, round, before_cell_id, after_cell_id,
            n_rows, min, median, max, fallback)
        SELECT s.root_id, s.card, s.repeat_dir, s.cell_op, s.cell_dtype, s.round, s.before_cell_id,
            s.after_cell_id, count(*), min(s.latency_before / s.latency_after),
            median(s.latency_before / s.latency_after), max(s.latency_before / s.latency_after),
            max(max(s.before_fallback, s.after_fallback))
        FROM temp.ab_rounds_now r
        JOIN roots ON roots.id = r.root_id AND roots.kind = 'screen'
        CROSS JOIN ab_slot_rows s ON s.root_id = r.root_id AND s.card IS r.card AND s.repeat_dir IS r.repeat_dir AND s.cell_op IS r.cell_op AND s.cell_dtype IS r.cell_dtype AND s.round IS r.round AND s.reason IS NULL
        GROUP BY r.rowid;

INSERT INTO ab_stale_ranges (root_id, op, dtype, shape)
        SELECT DISTINCT root_id, op, dtype, shape FROM temp.ab_keys_now;

DELETE FROM ab_stale_rounds;


-- ===== derive: the stale screening pairs found again (screenpairs.STEPS) =====
DELETE FROM temp.screen_pairs_now;

INSERT INTO temp.screen_pairs_now SELECT DISTINCT root_id, op, dtype FROM screen_stale_pairs;

DELETE FROM screen_pair_rows WHERE rowid IN (
        SELECT p.rowid FROM temp.screen_pairs_now n
        CROSS JOIN screen_pair_rows p ON p.root_id = n.root_id AND p.op IS n.op AND p.dtype IS n.dtype);

INSERT INTO screen_pair_rows (
            root_id, op, dtype, before_cell_id, after_cell_id, before_claims, after_claims,
            recorded_verdict, orig_verdict, environment_differs)
        WITH k AS MATERIALIZED (
            SELECT n.root_id, n.op, n.dtype
            FROM temp.screen_pairs_now n
            JOIN roots ON roots.id = n.root_id AND roots.kind = 'screen'
            WHERE EXISTS (SELECT 1 FROM cells c WHERE c.root_id = n.root_id AND c.op IS n.op
                          AND c.dtype IS n.dtype AND c.side IN ('before', 'after'))
               OR EXISTS (SELECT 1 FROM recorded_verdicts rv WHERE rv.root_id = n.root_id
                          AND rv.op IS n.op AND rv.dtype IS n.dtype)
        ),
        -- field -> its values where the pair's two cells ran on different
        -- things (environment_differences), of the stale pairs' roots only
        differs AS MATERIALIZED (
            SELECT root_id, op, dtype, json_group_object(field, json("values")) AS environment_differs
            FROM environment_differences
            WHERE root_id IN (SELECT root_id FROM k)
            GROUP BY root_id, op, dtype
        )
        SELECT
            k.root_id, k.op, k.dtype,
            (SELECT cell_id FROM (SELECT max(c.id) AS cell_id, count(*) AS claims FROM cells c
WHERE c.root_id = k.root_id AND c.op IS k.op AND c.dtype IS k.dtype AND c.side = 'before' AND c.superseded_at IS NULL)),
            (SELECT cell_id FROM (SELECT max(c.id) AS cell_id, count(*) AS claims FROM cells c
WHERE c.root_id = k.root_id AND c.op IS k.op AND c.dtype IS k.dtype AND c.side = 'after' AND c.superseded_at IS NULL)),
            (SELECT claims FROM (SELECT max(c.id) AS cell_id, count(*) AS claims FROM cells c
WHERE c.root_id = k.root_id AND c.op IS k.op AND c.dtype IS k.dtype AND c.side = 'before' AND c.superseded_at IS NULL)),
            (SELECT claims FROM (SELECT max(c.id) AS cell_id, count(*) AS claims FROM cells c
WHERE c.root_id = k.root_id AND c.op IS k.op AND c.dtype IS k.dtype AND c.side = 'after' AND c.superseded_at IS NULL)),
            (SELECT rv.verdict FROM recorded_verdicts rv WHERE rv.root_id = k.root_id
                AND rv.file = 'screen.tsv' AND rv.op IS k.op AND rv.dtype IS k.dtype
                ORDER BY rv.line LIMIT 1),
            (SELECT rv.verdict FROM recorded_verdicts rv WHERE rv.root_id = k.root_id
                AND rv.file = 'screen.tsv.orig' AND rv.op IS k.op AND rv.dtype IS k.dtype
                ORDER BY rv.line LIMIT 1),
            d.environment_differs
        FROM k
        LEFT JOIN differs d ON d.root_id = k.root_id AND d.op IS k.op AND d.dtype IS k.dtype;

DELETE FROM screen_stale_pairs;


-- ===== derive: the stale ranges computed again (ranges.STEPS) =====
INSERT INTO temp.ab_keys_unique (root_id, op, dtype, shape)
        SELECT DISTINCT root_id, op, dtype, shape FROM ab_stale_ranges;

DELETE FROM ab_range_rows WHERE rowid IN (
        SELECT g.rowid FROM temp.ab_keys_unique k
        CROSS JOIN ab_range_rows g ON g.root_id = k.root_id AND g.op IS k.op AND g.dtype IS k.dtype
         AND g.shape = k.shape);

INSERT INTO ab_range_rows (
            root_id, op, dtype, shape, caliber_id, rounds, min, median, max, latency_before, latency_after,
            fallback, fallback_rows, cards, rejected, rejected_reasons, log_mean, log_sd,
            effect, ci_low, ci_high, p_value, json_head, json_tail, stop_round, stop_reason)
        WITH keyed AS MATERIALIZED (
            SELECT k.key_id, s.root_id, s.card, s.repeat_dir, s.cell_op, s.cell_dtype, s.round, s.reason,
                   s.before_caliber_id AS caliber_id,
                   CASE WHEN s.reason IS NULL THEN s.latency_before / s.latency_after END AS ratio,
                   s.latency_before, s.latency_after,
                   max(s.before_fallback, s.after_fallback) AS fallback
            FROM temp.ab_keys_unique k
            JOIN roots ON roots.id = k.root_id AND roots.kind <> 'screen'
            CROSS JOIN ab_slot_rows s ON s.root_id = k.root_id AND s.op IS k.op AND s.dtype IS k.dtype
             AND s.shape = k.shape
        ),
        -- A round is one before and one after process: a shape its cells
        -- recorded twice is one observation of that round, its ratio the
        -- geometric mean of the twice (never two rounds). The range is over
        -- the rounds' ratios.
        per_round AS (
            SELECT key_id, caliber_id, card, avg(ln(ratio)) AS round_log, max(fallback) AS fallback,
                   avg(latency_before) AS round_before, avg(latency_after) AS round_after,
                   sum(fallback) AS fallback_rows
            FROM keyed WHERE reason IS NULL
            GROUP BY key_id, caliber_id, root_id, card, repeat_dir, cell_op, cell_dtype, round
        ),
        ranges AS (
            SELECT key_id, caliber_id, count(*) AS rounds, exp(min(round_log)) AS min,
                median(exp(round_log)) AS median, exp(max(round_log)) AS max, max(fallback) AS fallback,
                median(round_before) AS latency_before, median(round_after) AS latency_after,
                sum(fallback_rows) AS fallback_rows, count(DISTINCT card) AS cards, avg(round_log) AS log_mean,
                CASE WHEN count(*) > 1 THEN sqrt(max(0.0,
                    (sum(round_log * round_log) - count(*) * avg(round_log) * avg(round_log)) / (count(*) - 1)))
                END AS log_sd
            FROM per_round
            GROUP BY key_id, caliber_id
        ),
        rejected AS MATERIALIZED (
            SELECT key_id, count(*) AS rejected, group_concat(DISTINCT reason) AS rejected_reasons
            FROM keyed WHERE reason IS NOT NULL
            GROUP BY key_id
        ),
        -- An until-decided campaign's op stops once its ranges are decided
        -- (zlstore/store/sequential.py): each range shows the stop of the cell
        -- op and dtype whose rounds it comes from (the latest, where a
        -- row op's shape was measured by the cells of two).
        stopped AS MATERIALIZED (
            SELECT c.key_id, max(st.round) AS stop_round, st.reason AS stop_reason
            FROM (  -- nothing to read in a store without stops (every fixed campaign's): asked once
                SELECT DISTINCT key_id, root_id, cell_op AS op, cell_dtype AS dtype FROM keyed
                WHERE EXISTS (SELECT 1 FROM op_stops)
            ) c
            JOIN op_stops st ON st.root_id = c.root_id AND st.op IS c.op AND coalesce(st.dtype, '') = coalesce(c.dtype, '')
            GROUP BY c.key_id
        ),
        -- A fixed-round root is tested by the t-test; an until-decided one
        -- (roots.stopping) by the anytime-valid t-test, whose interval and
        -- p-value hold whenever the rounds stopped (zlstore/stats.py).
        tested AS (
            SELECT g.*, exp(g.log_mean) AS effect,
                   CASE WHEN g.rounds >= 3
                        THEN CASE WHEN g.anytime THEN anytime_t(g.rounds) ELSE t_critical(g.rounds - 1) END
                             * g.log_sd / sqrt(g.rounds) END AS half_width,
                   CASE WHEN g.anytime THEN anytime_p(g.log_mean, g.log_sd, g.rounds)
                        ELSE t_test_p(g.log_mean, g.log_sd, g.rounds) END AS p_value
            FROM (
                SELECT k.key_id, k.root_id, k.op, k.dtype, k.shape, ranges.caliber_id, ranges.rounds,
                       ranges.min, ranges.median, ranges.max, ranges.latency_before, ranges.latency_after,
                       ranges.fallback, ranges.fallback_rows, ranges.cards,
                       coalesce(rejected.rejected, 0) AS rejected, rejected.rejected_reasons,
                       ranges.log_mean, ranges.log_sd,
                       roots.stopping IS 'until-decided' AS anytime
                FROM ranges
                JOIN temp.ab_keys_unique k ON k.key_id = ranges.key_id
                JOIN roots ON roots.id = k.root_id
                LEFT JOIN rejected ON rejected.key_id = ranges.key_id
                UNION ALL
                SELECT k.key_id, k.root_id, k.op, k.dtype, k.shape, NULL, 0,
                       NULL, NULL, NULL, NULL, NULL, 0, 0, 0, rejected.rejected, rejected.rejected_reasons, NULL, NULL, 0
                FROM rejected
                JOIN temp.ab_keys_unique k ON k.key_id = rejected.key_id
                WHERE NOT EXISTS (SELECT 1 FROM keyed WHERE keyed.key_id = rejected.key_id AND keyed.reason IS NULL)
            ) g
        ),
        bounded AS MATERIALIZED (
            SELECT t.*, exp(t.log_mean - t.half_width) AS ci_low, exp(t.log_mean + t.half_width) AS ci_high
            FROM tested t
        )
        SELECT b.root_id, b.op, b.dtype, b.shape, b.caliber_id, b.rounds, b.min, b.median, b.max,
            b.latency_before, b.latency_after, b.fallback, b.fallback_rows, b.cards, b.rejected, b.rejected_reasons, b.log_mean, b.log_sd,
            b.effect, b.ci_low, b.ci_high, b.p_value,
            '"root": ' || json_quote(roots.name) || ', ' || '"op": ' || json_quote(b.op) || ', ' || '"dtype": ' || json_quote(b.dtype) || ', ' || '"shape": ' || json_quote(b.shape) || ', ' || '"rounds": ' || json_quote(b.rounds) || ', ' || '"effect": ' || json_quote(b.effect) || ', ' || '"ci_low": ' || json_quote(b.ci_low) || ', ' || '"ci_high": ' || json_quote(b.ci_high) || ', ' || '"p_value": ' || json_quote(b.p_value),
            '"min": ' || json_quote(b.min) || ', ' || '"median": ' || json_quote(b.median) || ', ' || '"max": ' || json_quote(b.max) || ', ' || '"latency_before": ' || json_quote(b.latency_before) || ', ' || '"latency_after": ' || json_quote(b.latency_after) || ', ' || '"fallback": ' || json_quote(b.fallback) || ', ' || '"fallback_rows": ' || json_quote(b.fallback_rows) || ', ' || '"rejected": ' || json_quote(b.rejected) || ', ' || '"rejected_reasons": ' || json_quote(b.rejected_reasons) || ', ' || '"log_mean": ' || json_quote(b.log_mean) || ', ' || '"log_sd": ' || json_quote(b.log_sd) || ', ' || '"cards": ' || json_quote(b.cards) || ', ' || '"root_kind": ' || json_quote(roots.kind) || ', ' || '"caliber_id": ' || json_quote(b.caliber_id) || ', ' || '"backend": ' || json_quote(calibers.backend) || ', ' || '"bench_level": ' || json_quote(calibers.bench_level) || ', ' || '"cudagraph": ' || json_quote(calibers.cudagraph) || ', ' || '"isolate_tuner_cache": ' || json_quote(calibers.isolate_tuner_cache) || ', ' || '"direct_repeat": ' || json_quote(calibers.direct_repeat) || ', ' || '"shape_mode": ' || json_quote(calibers.shape_mode) || ', ' || '"flagtune": ' || json_quote(calibers.flagtune) || ', ' || '"root_id": ' || json_quote(b.root_id) || ', ' || '"stopping": ' || json_quote(roots.stopping) || ', ' || '"stop_round": ' || json_quote(stopped.stop_round) || ', ' || '"stop_reason": ' || json_quote(stopped.stop_reason),
            stopped.stop_round, stopped.stop_reason
        FROM bounded b
        JOIN roots ON roots.id = b.root_id
        LEFT JOIN calibers ON calibers.id = b.caliber_id
        LEFT JOIN stopped ON stopped.key_id = b.key_id;

DELETE FROM ab_stale_ranges;


-- ===== derive: a batch's pending ranges, final=False only (ranges.PENDING) =====
UPDATE ab_range_rows SET q_value = NULL
        WHERE q_value IS NOT NULL AND root_id IN (SELECT root_id FROM temp.ab_keys_unique);


-- ===== derive: the stale noise floors, final only (floors.STEPS) =====
DELETE FROM noise_floor_rows WHERE rule IN (SELECT rule FROM ab_stale_floors);

INSERT INTO noise_floor_rows (rule, root_id, op, dtype, shape, caliber_id, machine, n, floor, fallback_rows)
        WITH quiet AS MATERIALIZED (
            SELECT v.before_cell_id, v.after_cell_id, v.rule, v.root_id,
                   CASE WHEN mb.machine IS ma.machine THEN mb.machine END AS machine
            FROM verdicts_by_rule v
            JOIN cells cb ON cb.id = v.before_cell_id
            JOIN cells ca ON ca.id = v.after_cell_id
            LEFT JOIN environment_machines mb ON mb.environment_id = cb.environment_id
            LEFT JOIN environment_machines ma ON ma.environment_id = ca.environment_id
            WHERE v.rule IN (SELECT rule FROM ab_stale_floors) AND v.verdict = 'NO_IR_DIFF'
              AND (mb.machine IS NULL OR ma.machine IS NULL OR mb.machine = ma.machine)
        )
        SELECT quiet.rule, quiet.root_id, s.op, s.dtype, s.shape, s.before_caliber_id, quiet.machine, count(*),
               max(abs(s.latency_before / s.latency_after - 1)), sum(max(s.before_fallback, s.after_fallback))
        FROM quiet
        JOIN cells b ON b.id = quiet.before_cell_id
        JOIN ab_slot_rows s
            ON s.root_id = b.root_id AND s.card IS b.pair_card AND s.repeat_dir IS b.repeat_dir AND s.cell_op IS b.op AND s.cell_dtype IS b.dtype AND s.round IS b.round
           AND s.before_cell_id = quiet.before_cell_id AND s.after_cell_id = quiet.after_cell_id
           AND s.reason IS NULL
        GROUP BY quiet.rule, quiet.root_id, s.op, s.dtype, s.shape, s.before_caliber_id, quiet.machine;

INSERT OR REPLACE INTO noise_floor_texts (rule, text)
        SELECT rule, text FROM noise_floor_texts_now
        WHERE rule IN (SELECT rule FROM ab_stale_floors) AND text IS NOT NULL;

DELETE FROM ab_stale_floors;


-- ===== derive: q-values and judgements, final only (ranges.FAMILIES, ranges.JUDGING) =====
UPDATE ab_range_rows SET q_value = adjusted.q_value, judged = NULL FROM (
            SELECT range_rowid, min(1.0, min(p_value * family / rank) OVER (
                       PARTITION BY root_id ORDER BY rank DESC ROWS UNBOUNDED PRECEDING)) AS q_value
            FROM (
                SELECT rowid AS range_rowid, root_id, p_value,
                       count(*) OVER (PARTITION BY root_id) AS family,
                       row_number() OVER (PARTITION BY root_id ORDER BY p_value, rowid) AS rank
                FROM ab_range_rows
                WHERE p_value IS NOT NULL AND root_id IN (
                    SELECT root_id FROM temp.ab_keys_unique
                    UNION SELECT root_id FROM ab_range_rows
                          WHERE judged IS NULL AND p_value IS NOT NULL AND q_value IS NULL)
            )
        ) adjusted
        WHERE ab_range_rows.rowid = adjusted.range_rowid AND ab_range_rows.q_value IS NOT adjusted.q_value;

DELETE FROM temp.ab_judged_now;

INSERT INTO temp.ab_judged_now
        SELECT range_rowid, finding, finding_position, to_settle, noise_floor, clears_floor, floor_note,
               floor_rows, floor_roots, json
        FROM ab_range_unjudged;

UPDATE ab_range_rows SET finding = j.finding, finding_position = j.finding_position,
            to_settle = j.to_settle, noise_floor = j.noise_floor, clears_floor = j.clears_floor,
            floor_note = j.floor_note, floor_rows = j.floor_rows, floor_roots = j.floor_roots, judged = 1
        FROM temp.ab_judged_now j WHERE ab_range_rows.rowid = j.range_rowid;

INSERT OR REPLACE INTO ab_range_json (range_rowid, json)
        SELECT range_rowid, json FROM temp.ab_judged_now;

INSERT INTO ab_judgement_basis (id, basis) SELECT 1, basis FROM judging_basis WHERE true
        ON CONFLICT (id) DO UPDATE SET basis = excluded.basis WHERE basis IS NOT excluded.basis;

DELETE FROM temp.ab_judged_now;
