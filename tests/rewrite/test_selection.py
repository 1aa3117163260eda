"""Selection queries' exact read, noise off, on DuckDB and on Spark (``make_backend`` runs this
module once per backend): the histogram of (bin, grid cell) counts the exponential mechanism
reads (dpsql.execute.selection) equals the counts computed in Python from the raw rows (the
value clamped to the bounds, NULL dropped, cell = floor((v - lower) / step) capped at the last
cell; a float column's NaN and infinities clamped as the SUM clamp does; a date as its days
after the first day of its bounds), and the top-k read equals a direct GROUP BY."""

from __future__ import annotations

import datetime
import math

import numpy as np
import pytest

from dpsql.execute.exact import read_bins, read_domains
from dpsql.execute.selection import cell_counts
from dpsql.metadata import loads_metadata
from dpsql.session import Session
from tests.db_files import writing

METADATA = loads_metadata("""
tables:
  m:
    columns:
      id: {max_freq: 1, type: INTEGER}
      g: {max_freq: 100, releasable: true, domain: {values: [a, b, c]}, type: VARCHAR}
      y: {max_freq: 100, bounds: [-3, 40], type: INTEGER}
      v: {max_freq: 100, bounds: [-1.0, 2.5], type: DOUBLE}
      d: {max_freq: 100, bounds: ['2020-01-01', '2022-12-31'], type: DATE}
  k:
    public: true
    columns:
      g: {max_freq: 2, type: VARCHAR}
""")


def _rows() -> list[tuple]:
    out = []
    for i in range(300):
        y = None if i % 17 == 0 else (i * 7) % 53 - 6  # -6..46: both bounds are crossed
        v = [None, float("nan"), float("inf"), -float("inf"), 2.5, -1.0][i % 6] \
            if i % 5 == 0 else ((i * 37) % 101) / 25.0 - 1.3
        d = None if i % 23 == 0 else datetime.date(2019, 11, 1) + datetime.timedelta(i * 5)
        out.append((i, "abcd"[i % 4], y, v, d))
    return out


ROWS = _rows()


@pytest.fixture(scope="module")
def engine(tmp_path_factory, make_backend):
    path = tmp_path_factory.mktemp("selection_rewrite") / "m.duckdb"
    with writing(path) as con:
        con.execute("CREATE TABLE m (id INTEGER, g VARCHAR, y INTEGER, v DOUBLE, d DATE)")
        con.executemany("INSERT INTO m VALUES (?, ?, ?, ?, ?)", ROWS)
        con.execute("CREATE TABLE k AS SELECT * FROM (VALUES ('a'), ('a'), ('b')) t(g)")
    backend = make_backend(path, METADATA)
    session = Session(METADATA, backend)
    yield session
    session.close()
    backend.close()


def _cell(value, lower: float, upper: float, cells: int, step: float, integer: bool,
          origin: datetime.date | None = None):
    if value is None:
        return None
    if origin is not None:
        value = (value - origin).days
    value = upper if math.isnan(value) else min(max(value, lower), upper)
    if integer:
        return int(value - lower)
    return min(math.floor((value - lower) / step), cells - 1)


def _histogram(engine: Session, sql: str):
    prepared = engine.prepare(sql)
    domains = read_domains(engine.backend, prepared.compiled, [])
    bins = read_bins(engine.backend, prepared.compiled, [], domains)
    return prepared, domains, cell_counts(bins, prepared.query.grid.cells)


CASES = [
    # (sql, value column, keys in the domain order, rows kept)
    ("SELECT MEDIAN(y) FROM m", 2, None, lambda r: True),
    ("SELECT g, MIN(y), MAX(y) FROM m WHERE id % 3 <> 0 GROUP BY g", 2, ["a", "b", "c"],
     lambda r: r[0] % 3 != 0),
    ("SELECT g, quantile_cont(v, 0.3) FROM m GROUP BY g", 3, ["a", "b", "c"], lambda r: True),
    ("SELECT MAX(v) FROM m WHERE y > 3", 3, None, lambda r: r[2] is not None and r[2] > 3),
    # dates: 1,096 days in the bounds, so 1,024 cells; the data start two months early
    ("SELECT g, MIN(d), MEDIAN(d) FROM m GROUP BY g", 4, ["a", "b", "c"], lambda r: True),
]


#: Spark runs one case of each kind (integer grid with keys, float cells with NaN, dates):
#: each Spark query costs seconds
ON_SPARK = {CASES[1][0], CASES[2][0], CASES[4][0]}


@pytest.mark.parametrize(("sql", "column", "keys", "keep"), CASES, ids=[c[0] for c in CASES])
def test_cell_counts_equal_the_raw_rows(engine, backend_name, sql, column, keys, keep):
    if backend_name == "spark" and sql not in ON_SPARK:
        pytest.skip("on DuckDB only: Spark runs one case of each kind (ON_SPARK)")
    prepared, domains, counts = _histogram(engine, sql)
    grid = prepared.query.grid
    expected = np.zeros((len(keys) if keys else 1, grid.cells), dtype=np.int64)
    for row in ROWS:
        if not keep(row) or (keys is not None and row[1] not in keys):
            continue
        cell = _cell(row[column], grid.lower, grid.upper, grid.cells, grid.step, grid.integer,
                     grid.origin)
        if cell is not None:
            expected[keys.index(row[1]) if keys else 0, cell] += 1
    if keys:
        assert list(domains.values[0]) == keys
    np.testing.assert_array_equal(counts, expected)
    assert counts.sum() > 50  # the data reach the grid (not vacuous)


def test_public_join_counts_each_joined_row(engine, backend_name):
    if backend_name == "spark":
        pytest.skip("on DuckDB only: the join is the ordinary rewrite's")
    prepared, _, counts = _histogram(engine, "SELECT MIN(m.y) FROM m JOIN k ON m.g = k.g")
    assert prepared.query.sensitivity == 2.0  # k.g has max frequency 2
    joined = [r for r in ROWS if r[2] is not None for _ in range({"a": 2, "b": 1}.get(r[1], 0))]
    assert counts.sum() == len(joined)


def test_top_k_read_is_the_group_by(engine):
    prepared = engine.prepare("SELECT g FROM m WHERE y > 0 GROUP BY g ORDER BY COUNT(*) DESC "
                              "LIMIT 2")
    domains = read_domains(engine.backend, prepared.compiled, [])
    bins = read_bins(engine.backend, prepared.compiled, [], domains)
    expected = [sum(1 for r in ROWS if r[1] == g and r[2] is not None and r[2] > 0)
                for g in "abc"]
    assert list(domains.values[0]) == ["a", "b", "c"]
    assert bins.exact[0].tolist() == expected
    assert len(set(expected)) == 3
    top = engine.run("SELECT g FROM m WHERE y > 0 GROUP BY g ORDER BY COUNT(*) DESC LIMIT 2",
                     epsilon=1e6).rows
    assert [r[0] for r in top] == sorted("abc", key=lambda g: -expected["abc".index(g)])[:2]
