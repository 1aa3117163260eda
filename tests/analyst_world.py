"""A tiny database of typed columns for the analyst-facing tests (the SQLAlchemy dialect,
Arrow and pandas results, the histogram example): not a test module.

``t`` has 3 rows: a releasable VARCHAR key ``g`` (domain a, b, empty: the last bin is empty),
an INTEGER ``i``, a DECIMAL(15,2) ``d`` and a DOUBLE ``x``, all bounded.
"""

from __future__ import annotations

from pathlib import Path

from tests.db_files import writing

METADATA = """\
tables:
  t:
    columns:
      g: {max_freq: 10, releasable: true, type: VARCHAR, domain: {values: [a, b, empty]}}
      i: {bounds: [0, 100], type: INTEGER}
      d: {bounds: [0, 1000], type: 'DECIMAL(15,2)'}
      x: {bounds: [0, 10], type: DOUBLE}
"""

ROWS = [("a", 3, "10.25", 0.5), ("a", 4, "20.50", 1.5), ("b", 5, "0.01", 2.0)]

#: epsilon at which counts are exact (noise nonzero with probability ~e^-1000) and sums are
#: within a cent
EXACT = 2000.0


def build(folder: Path) -> tuple[Path, Path]:
    """Write ``t.duckdb`` and its metadata ``t.yaml`` (no ledger line) into ``folder``."""
    db, md = folder / "t.duckdb", folder / "t.yaml"
    with writing(db) as con:
        con.execute("CREATE TABLE t (g VARCHAR, i INTEGER, d DECIMAL(15,2), x DOUBLE)")
        con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", ROWS)
    md.write_text(METADATA)
    return db, md
