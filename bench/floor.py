"""The floor: only the work no ingest can avoid, done the plain way.

Walk the tree, read every run.log and .ttgir byte, hash each .ttgir, parse
each `[INFO] {...}` record line with json.loads, and insert the raw rows
(one per element of a record's result list) into one table in one
transaction. No inference, no provenance, no dedup, no fingerprints: an
ingest that costs at most twice this is close to the speed of reading.

    python bench/floor.py RUNS_DIR DB_FILE
"""

import hashlib
import json
import os
import sqlite3
import sys
import time


def floor(top: str, db_path: str) -> dict:
    """Read, hash, parse and insert; returns counts and seconds."""
    t0 = time.perf_counter()
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE IF NOT EXISTS raw_rows (cell TEXT, line INTEGER, idx INTEGER, row TEXT)")
    conn.execute("BEGIN IMMEDIATE")
    files = ttgir = rows = nbytes = 0
    batch = []
    insert = "INSERT INTO raw_rows (cell, line, idx, row) VALUES (?, ?, ?, ?)"
    for directory, subdirs, names in os.walk(top):
        subdirs.sort()
        for name in names:
            if name == "run.log":
                with open(os.path.join(directory, name), "rb") as f:
                    data = f.read()
                files += 1
                nbytes += len(data)
                for number, line in enumerate(data.split(b"\n"), 1):
                    if line.startswith(b"[INFO] {"):
                        try:
                            record = json.loads(line[7:])
                        except ValueError:
                            continue
                        for idx, row in enumerate(record.get("result") or ()):
                            batch.append((directory, number, idx, json.dumps(row)))
                if len(batch) >= 5000:
                    conn.executemany(insert, batch)
                    rows += len(batch)
                    batch.clear()
            elif name.endswith(".ttgir"):
                with open(os.path.join(directory, name), "rb") as f:
                    data = f.read()
                hashlib.sha256(data).hexdigest()
                files += 1
                ttgir += 1
                nbytes += len(data)
    conn.executemany(insert, batch)
    rows += len(batch)
    conn.execute("COMMIT")
    conn.close()
    return {"files": files, "ttgir": ttgir, "rows": rows, "bytes": nbytes, "seconds": time.perf_counter() - t0}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    print(json.dumps(floor(argv[0], argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
