"""The small database the sample-and-aggregate tests share (not a test module).

``t`` (private, 4 blocks by customer ``cid``), ``u`` (private, 3 blocks by the whole row),
``q`` (private, not enabled) and ``p`` (public, joined on ``g``). :func:`build` writes it.
"""

from __future__ import annotations

from pathlib import Path

from dpsql.metadata import Metadata, loads_metadata
from tests.db_files import writing

METADATA_TEXT = """\
tables:
  t:
    sample_aggregate: {blocks: 4, by: cid}
    columns:
      id: {type: INTEGER, max_freq: 1}
      cid: {type: INTEGER, max_freq: 5}
      x: {type: DOUBLE, bounds: [0, 100]}
      g: {type: VARCHAR}
      n: {type: INTEGER}
  u:
    sample_aggregate: {blocks: 3}
    columns:
      id: {type: INTEGER}
      v: {type: DOUBLE}
  q:
    columns:
      id: {type: INTEGER}
  p:
    public: true
    columns:
      g: {type: VARCHAR}
      w: {type: DOUBLE}
"""


def metadata() -> Metadata:
    return loads_metadata(METADATA_TEXT)


def build(path: Path) -> Path:
    """Write the database to ``path``: 40 rows of t (8 customers, one NULL n per 7 rows),
    12 of u, 3 of q, 3 of p."""
    with writing(path) as con:
        con.execute("""CREATE TABLE t AS SELECT i::INTEGER AS id, (i % 8)::INTEGER AS cid,
                       (i * 2.5)::DOUBLE AS x, (i % 3)::VARCHAR AS g,
                       CASE WHEN i % 7 = 0 THEN NULL ELSE i % 5 END::INTEGER AS n
                       FROM range(40) r(i)""")
        con.execute("CREATE TABLE u AS SELECT i::INTEGER AS id, (i * 1.5)::DOUBLE AS v "
                    "FROM range(12) r(i)")
        con.execute("CREATE TABLE q AS SELECT i::INTEGER AS id FROM range(3) r(i)")
        con.execute("CREATE TABLE p AS SELECT * FROM (VALUES ('0', 1.0::DOUBLE), ('1', 2.0), "
                    "('2', 0.5)) v(g, w)")
    return path
