"""Red team: the two-stage choice of a unit's groups (issue #17, 86d0371,
dpsql.units.rewrite._two_stage; docs/privacy.md, "With GROUP BY: two stages").

Each unit keeps the ``max_groups`` (kappa) groups with the smallest ``hash(hash(unit id,
keys))``, ties by the keys (NULLS LAST). The claims attacked here, all with the noise off (the
exact released bins, through the real plan on DuckDB or Spark):

* the choice is a function of the unit's own rows: removing (or adding) one unit with its FK
  cascade moves the released bins by at most kappa * C * w in L1 (C = max_rows_per_group,
  w = 1 for COUNT, max(|l|, |u|) for SUM) -- a brute force over every removal and one fresh
  addition, keys INTEGER, BIGINT, VARCHAR ('' and NULL), DOUBLE (-0.0, NaN, NULL), DATE,
  BOOLEAN, one and two keys, NULL unit ids (rows of no unit), orphans along a direct path and
  along a hop;
* directly: the release of a database is the sum of the releases of each unit's rows alone
  (and of the rows of no unit): no unit's choice depends on another unit's rows;
* deterministic: the same rows stored in another order, read at 1 or 4 DuckDB threads (with
  -0.0 / 0.0, NaN payloads and a NOCASE collation, whose group representative is whichever
  row comes first), give bit-identical bins;
* hash ties: DuckDB's hash of a BIGINT is a bijection, so some BIGINT X hashes as NULL does
  (:data:`X_NULL`); then hash(u, X) = hash(u, NULL) for every unit, and the key tie-break
  decides (X before NULL) whatever the row order. Spark's Murmur3 skips NULL arguments, so
  hash(u, NULL, 5) = hash(u, 5, NULL) there for every unit: the same tie-break decides;
* Spark: the same L1 bound over every removal (that Spark and DuckDB choose differently is the
  known difference, tests/redteam/test_sum_error_attacks.py, not tested here);
* data-dependent errors: NaN, +-inf and 1e308 SUM arguments are clamped, not an error.

HELD: all of the above. FIXED (was a strict xfail): the rendered window orders by the
backend's DEFAULT order and null order (``ORDER BY HASH(HASH(..)), __k0``, no ASC / NULLS
LAST on DuckDB), which dpsql's DuckDB lock-down did not pin (it pinned default_collation): an
instance opened in the same process with ``SET default_order='DESC'`` kept each unit's
LARGEST hashes, with ``default_null_order='nulls_first'`` a NULL key won a tie. Still a
function of each unit's own rows (no privacy loss), but the same database released different
bins depending on an instance setting. The lock-down now pins both (and refuses an instance
already locked with others), dpsql.backends.duckdb.

``DPSQL_2S_DATABASES=<n> DPSQL_2S_SEED=<s>`` for a deeper brute force.
"""

from __future__ import annotations

import datetime
import os
import random
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest

from dpsql.metadata import Metadata, loads_metadata
from tests.db_files import writing
from tests.redteam.float_sums import Query, Tables, make_db, same

#: DuckDB's hash of this BIGINT is hash(NULL) (13787848793156543929): its murmur finaliser
#: inverted (x ^= x >> 32; x *= 0xd6e8feb86659fd93, twice, x ^= x >> 32), so a group keyed X
#: and a group keyed NULL tie on hash(hash(u, key)) for EVERY unit u
X_NULL = -2930909409056394622

#: key values per column type: '' and NULL, -0.0 / 0.0 / NaN / NULL, the hash twin of NULL
POOLS: dict[str, list[Any]] = {
    "INTEGER": [1, 2, 3, 0, -1, None],
    "BIGINT": [X_NULL, None, 7, 2**62],
    "VARCHAR": ["a", "b", "", "ab", "a long string beyond twelve bytes", None],
    "DOUBLE": [0.0, -0.0, 1.5, float("nan"), -2.0, None],
    "DATE": [datetime.date(2020, 1, 1), datetime.date(1970, 1, 1), datetime.date(2024, 2, 29),
             None],
    "BOOLEAN": [True, False, None],
}
KEY_TYPES = list(POOLS)
#: SUM arguments (bounds [-2, 3]): beyond both bounds, NaN, infinities, NULL
VALUES = [-3.0, -2.0, -0.5, 0.0, 1.25, 3.0, 4.0, float("nan"), float("inf"), float("-inf"), None]
FRESH = 50  # the id of the unit added (fresh: no row refers to it)


def world(t1: str, t2: str, kappa: int, c: int) -> Metadata:
    """people(pid) the unit; visits(vid, v_pid, k1, k2, v) reach it directly (v_pid: NULL is
    no unit, 9 has no people row), tags(t_vid, k1, v) through visits.vid (99 and NULL resolve
    to no visit); the keys' domains are public tables holding every pool value."""
    return loads_metadata(f"""
privacy_unit: {{table: people, column: pid, max_contribution: 4, max_groups: {kappa},
               max_rows_per_group: {c}}}
tables:
  people: {{columns: {{pid: {{type: INTEGER}}}}}}
  dom1: {{public: true, columns: {{d: {{type: {t1}}}}}}}
  dom2: {{public: true, columns: {{d: {{type: {t2}}}}}}}
  visits:
    unit: v_pid
    columns:
      vid: {{type: INTEGER}}
      v_pid: {{type: INTEGER}}
      k1: {{type: {t1}, releasable: true, domain: {{table: dom1, column: d}}}}
      k2: {{type: {t2}, releasable: true, domain: {{table: dom2, column: d}}}}
      v: {{type: DOUBLE, bounds: [-2, 3]}}
  tags:
    unit: {{via: t_vid, to: visits.vid}}
    columns:
      t_vid: {{type: INTEGER}}
      k1: {{type: {t1}, releasable: true, domain: {{table: dom1, column: d}}}}
      v: {{type: DOUBLE, bounds: [-2, 3]}}
""", "<two-stage red team>")


QUERIES = [
    "SELECT k1, COUNT(*), SUM(v) FROM visits GROUP BY k1",
    "SELECT k1, k2, COUNT(*), SUM(v) FROM visits GROUP BY k1, k2",
    # through the hop: orphans (t_vid 99, NULL) and tags of visits of no unit: no unit
    "SELECT k1, COUNT(*), SUM(v) FROM tags GROUP BY k1",
    "SELECT t.k1, w.k2, COUNT(*), SUM(t.v) FROM tags t JOIN visits w ON w.vid = t.t_vid"
    " GROUP BY t.k1, w.k2",
]

Db = tuple[list[int], list[tuple[Any, ...]], list[tuple[Any, ...]]]  # people, visits, tags


def tables(t1: str, t2: str, db: Db) -> Tables:
    people, visits, tags = db
    return {"people": (["pid INTEGER"], [(p,) for p in people]),
            "dom1": ([f"d {t1}"], [(x,) for x in POOLS[t1]]),
            "dom2": ([f"d {t2}"], [(x,) for x in POOLS[t2]]),
            "visits": (["vid INTEGER", "v_pid INTEGER", f"k1 {t1}", f"k2 {t2}", "v DOUBLE"],
                       visits),
            "tags": (["t_vid INTEGER", f"k1 {t1}", "v DOUBLE"], tags)}


def random_db(rng: random.Random, t1: str, t2: str) -> Db:
    """1-3 people; 0-10 visits (unique vid) of them, of unit 9 (no people row: an orphan of a
    direct path, still unit 9) or of no unit (NULL); 0-8 tags of those visits, of visit 99
    (none) or of no visit (NULL). Few units and many rows: units over kappa groups are common."""
    people = list(range(1, rng.randint(1, 3) + 1))
    owners: list[int | None] = [*people, 9, None]
    visits = [(vid, rng.choice(owners), rng.choice(POOLS[t1]), rng.choice(POOLS[t2]),
               rng.choice(VALUES)) for vid in range(1, rng.randint(0, 10) + 1)]
    vids = [v[0] for v in visits] + [99, None]
    tags = [(rng.choice(vids), rng.choice(POOLS[t1]), rng.choice(VALUES))
            for _ in range(rng.randint(0, 8))]
    return people, visits, tags


def units(db: Db) -> list[int]:
    people, visits, _ = db
    return sorted({*people, *(v[1] for v in visits if v[1] is not None)})


def only(db: Db, unit: int | None) -> Db:
    """The rows of ``unit`` alone (its people row, visits and their tags); None: the rows of no
    unit (visits of NULL, tags whose t_vid resolves to no visit or to one of NULL)."""
    people, visits, tags = db
    owner = {v[0]: v[1] for v in visits}
    return ([p for p in people if p == unit], [v for v in visits if v[1] == unit],
            [t for t in tags if owner.get(t[0]) == unit])


def remove_unit(db: Db, unit: int) -> Db:
    """The neighbour: ``db`` without ``unit`` and its cascade (visits, their tags)."""
    people, visits, tags = db
    gone = {v[0] for v in visits if v[1] == unit}
    return ([p for p in people if p != unit], [v for v in visits if v[1] != unit],
            [t for t in tags if t[0] not in gone])


def add_unit(db: Db, rng: random.Random, t1: str, t2: str) -> Db:
    """The other neighbour: ``db`` plus a fresh unit with 0-4 visits (fresh vids) and tags."""
    people, visits, tags = db
    mine = [(100 + i, FRESH, rng.choice(POOLS[t1]), rng.choice(POOLS[t2]), rng.choice(VALUES))
            for i in range(rng.randint(0, 4))]
    more = [(rng.choice(mine)[0], rng.choice(POOLS[t1]), rng.choice(VALUES))
            for _ in range(rng.randint(0, 4))] if mine else []
    return [*people, FRESH], visits + mine, tags + more


def l1(a: list[np.ndarray], b: list[np.ndarray]) -> list[Fraction]:
    """Per measurement the exact L1 distance of two releases' bins."""
    return [sum((abs(Fraction(x) - Fraction(y)) for x, y in zip(
        np.atleast_1d(p).tolist(), np.atleast_1d(q).tolist(), strict=True)), Fraction(0))
        for p, q in zip(a, b, strict=True)]


def claims(q: Query, kappa: int, c: int) -> list[Fraction]:
    """kappa * C * w per measurement, checked against the analysis' own claim."""
    out = []
    for m in q.analysis.measurements:
        w = 1 if m.function == "COUNT" else max(abs(x) for x in m.bounds or (0, 0))
        assert m.sensitivity.at(0) == kappa * c * w, (m, kappa, c)
        out.append(Fraction(kappa * c * w))
    return out


DATABASES = int(os.environ.get("DPSQL_2S_DATABASES", "1"))
SEED = os.environ.get("DPSQL_2S_SEED", "17")
SETTINGS = [(1, 1), (1, 2), (2, 1), (2, 2)]


def _second(t1: str) -> str:
    return KEY_TYPES[(KEY_TYPES.index(t1) + 1) % len(KEY_TYPES)]


def _covers(t1: str, setting: int, query: int) -> bool:
    """Half the (setting, query) pairs per key type by default (every pair is run for three
    of the six key types), every pair in a deep run (``DPSQL_2S_DATABASES`` > 1)."""
    return DATABASES > 1 or (KEY_TYPES.index(t1) + setting + query) % 2 == 0


# -------------------------------------------------------------- 1. brute force, every neighbour


@pytest.mark.parametrize("t1", KEY_TYPES)
def test_every_removal_and_a_fresh_addition_move_the_bins_by_at_most_kappa_c_w(t1):
    """HELD: kappa in {1, 2}, C in {1, 2}, every query (half the pairs per key type, see
    :func:`_covers`), every unit's removal and one fresh unit's addition; the L1 move of each
    measurement's bins <= kappa * C * w. (Deep runs ran clean too: 20 databases per setting,
    query and type but BIGINT, ~8,000 neighbours; and DPSQL_2S_DATABASES=6 DPSQL_2S_SEED=99.)"""
    t2 = _second(t1)
    rng = random.Random(f"{SEED}:{t1}")
    checked = 0
    for si, (kappa, c) in enumerate(SETTINGS):
        md = world(t1, t2, kappa, c)
        for qi, sql in enumerate(QUERIES):
            if not _covers(t1, si, qi):
                continue
            q = Query(sql, md)
            bound = claims(q, kappa, c)
            with q.in_memory() as run:
                for _ in range(DATABASES):
                    db = random_db(rng, t1, t2)
                    base = run(tables(t1, t2, db))
                    neighbours = [(f"remove {u}", remove_unit(db, u)) for u in units(db)]
                    neighbours.append((f"add {FRESH}", add_unit(db, rng, t1, t2)))
                    for name, other in neighbours:
                        moved = l1(base, run(tables(t1, t2, other)))
                        checked += 1
                        assert all(m <= b for m, b in zip(moved, bound, strict=True)), (
                            f"PRIVACY BUG: {sql} kappa={kappa} C={c} {name}: moved {moved} > "
                            f"{bound}\ndb={db}")
    assert checked >= len(SETTINGS) * len(QUERIES) * DATABASES // 2


@pytest.mark.parametrize("t1", KEY_TYPES)
def test_the_release_is_the_sum_of_each_units_release_alone(t1):
    """HELD: no unit's choice depends on another unit's rows. The release of a database equals,
    bin by bin and exactly, the sum of the releases of each unit's rows alone and of the rows
    of no unit (added in full): were a unit's kept groups to change with the others present,
    its contribution would land in another bin. kappa 1 (every unit over it chooses)."""
    t2 = _second(t1)
    rng = random.Random(f"{SEED}:alone:{t1}")
    for c in (1, 2):
        md = world(t1, t2, 1, c)
        for sql in QUERIES:
            q = Query(sql, md)
            with q.in_memory() as run:
                for _ in range(DATABASES):
                    db = random_db(rng, t1, t2)
                    whole = run(tables(t1, t2, db))
                    parts = [run(tables(t1, t2, only(db, u))) for u in [*units(db), None]]
                    for j, value in enumerate(whole):
                        total = [sum((Fraction(p[j].tolist()[i]) for p in parts), Fraction(0))
                                 for i in range(len(value))]
                        assert [Fraction(x) for x in value.tolist()] == total, (sql, db, j)


# --------------------------------------------------------------------------- 2. determinism

COLLATED_MD = loads_metadata("""
privacy_unit: {table: people, column: pid, max_contribution: 4, max_groups: 2,
               max_rows_per_group: 2}
tables:
  people: {columns: {pid: {type: INTEGER}}}
  dom: {public: true, columns: {d: {type: DOUBLE}}}
  sdom: {public: true, columns: {s: {type: VARCHAR}}}
  visits:
    unit: v_pid
    columns:
      v_pid: {type: INTEGER}
      k: {type: DOUBLE, releasable: true, domain: {table: dom, column: d}}
      s: {type: VARCHAR, releasable: true, domain: {table: sdom, column: s}}
      v: {type: DOUBLE, bounds: [-1, 3]}
""", "<two-stage determinism>")

#: 250,000 visits (3 row groups: DuckDB scans them in parallel) of ~20,000 units (1% of no
#: unit, some orphans); k -0.0 / 0.0 / NaN / -NaN / NULL / 1 / 2.5, s a NOCASE string 'x' /
#: 'X' / '' / NULL / 'y': a unit's group representative is whichever row comes first
BIG_VISITS = """SELECT
    CASE WHEN i % 97 = 0 THEN NULL ELSE (hash(i) % 20011)::INTEGER END AS v_pid,
    CASE hash(i * 3) % 7 WHEN 0 THEN -0.0::DOUBLE WHEN 1 THEN 0.0 WHEN 2 THEN 'nan'::DOUBLE
      WHEN 3 THEN -('nan'::DOUBLE) WHEN 4 THEN NULL WHEN 5 THEN 1.0 ELSE 2.5 END AS k,
    CASE hash(i * 5) % 5 WHEN 0 THEN '' WHEN 1 THEN NULL WHEN 2 THEN 'x' WHEN 3 THEN 'X'
      ELSE 'y' END AS s,
    ((hash(i * 11) % 17)::DOUBLE - 4) / 4 AS v
    FROM range(250000) r(i)"""


def _big_db(path: Path, order: str) -> Path:
    with writing(path) as con:
        con.execute("CREATE TABLE people AS SELECT range::INTEGER AS pid FROM range(20000)")
        con.execute("CREATE TABLE dom AS SELECT * FROM (VALUES (0.0::DOUBLE), (1.0), "
                    "('nan'::DOUBLE), (NULL), (2.5)) t(d)")
        con.execute("CREATE TABLE sdom AS SELECT * FROM (VALUES (''), ('x'), (NULL), ('y')) t(s)")
        con.execute("CREATE TABLE visits (v_pid INTEGER, k DOUBLE, s VARCHAR COLLATE NOCASE, "
                    "v DOUBLE)")
        con.execute(f"INSERT INTO visits SELECT * FROM ({BIG_VISITS}) ORDER BY {order}")
    return path


@pytest.mark.parametrize("sql", ["SELECT k, COUNT(*), SUM(v) FROM visits GROUP BY k",
                                 "SELECT k, s, COUNT(*), SUM(v) FROM visits GROUP BY k, s"])
def test_shuffled_rows_and_thread_counts_give_identical_bins(tmp_path, sql):
    """HELD: the same rows in two storage orders, each read at 1 and twice at 4 threads, give
    bit-identical bins (DuckDB hashes -0.0 as 0.0, every NaN alike and a NOCASE string by its
    collated value, and the key tie-break compares them alike)."""
    q = Query(sql, COLLATED_MD)
    paths = [_big_db(tmp_path / "in_order.duckdb", "hash(v_pid), k, s"),
             _big_db(tmp_path / "shuffled.duckdb", "hash(v * 7 + coalesce(v_pid, 3))")]
    runs = [q.exact(p, threads) for p in paths for threads in (1, 4, 4)]
    assert same(runs), [[a.tolist() for a in r] for r in runs]
    assert sum(runs[0][0].tolist()) > 10_000  # the bins are not empty: the units chose


# ------------------------------------------------------------------------- 3. hash ties

TIE_MD = loads_metadata("""
privacy_unit: {table: people, column: pid, max_contribution: 4, max_groups: 1,
               max_rows_per_group: 1}
tables:
  people: {columns: {pid: {type: INTEGER}}}
  dom: {public: true, columns: {d: {type: BIGINT}}}
  visits:
    unit: v_pid
    columns:
      v_pid: {type: INTEGER}
      k: {type: BIGINT, releasable: true, domain: {table: dom, column: d}}
      k2: {type: BIGINT, releasable: true, domain: {table: dom, column: d}}
""", "<two-stage ties>")


def _tie_db(path: Path, rows: Sequence[tuple[Any, ...]]) -> Path:
    return make_db(path, {"people": (["pid INTEGER"], [(1,), (2,)]),
                          "dom": (["d BIGINT"], [(X_NULL,), (None,)]),
                          "visits": (["v_pid INTEGER", "k BIGINT", "k2 BIGINT"], list(rows))})


def test_x_null_is_a_hash_twin_of_null_in_duckdb():
    """The premise of the tie tests: DuckDB hashes X_NULL and NULL alike, alone and salted."""
    con = duckdb.connect()
    a, b, c, d = con.execute(f"SELECT hash({X_NULL}::BIGINT), hash(NULL::BIGINT), "
                             f"hash(hash(7, {X_NULL}::BIGINT)), hash(hash(7, NULL::BIGINT))"
                             ).fetchone()
    assert a == b and c == d


@pytest.mark.parametrize("rows", [
    [(1, None, None), (1, X_NULL, None), (2, X_NULL, None), (2, None, None)],
    [(2, None, None), (1, X_NULL, None), (2, X_NULL, None), (1, None, None)],
], ids=["in_order", "reversed"])
def test_a_tie_on_one_key_keeps_the_non_null_key_whatever_the_order(tmp_path, rows):
    """HELD: each unit has groups X_NULL and NULL, tied on the hash; the tie-break (the keys,
    NULLS LAST) keeps X_NULL for both units, in either storage order, at 1 and 4 threads.
    Bins: X_NULL, NULL (the domain in order, NULLS LAST)."""
    q = Query("SELECT k, COUNT(*) FROM visits GROUP BY k", TIE_MD)
    path = _tie_db(tmp_path / "t.duckdb", rows)
    runs = [q.exact(path, threads) for threads in (1, 4)]
    assert same(runs)
    assert runs[0][0].tolist() == [2, 0]


@pytest.mark.parametrize("rows", [
    [(1, None, X_NULL), (1, X_NULL, None)], [(1, X_NULL, None), (1, None, X_NULL)],
    [(1, None, None), (1, X_NULL, None)], [(1, X_NULL, None), (1, None, None)],
], ids=["pair", "pair_reversed", "null_null", "null_null_reversed"])
def test_a_tie_on_two_keys_is_broken_by_the_first_key_nulls_last(tmp_path, rows):
    """HELD: (NULL, X_NULL) and (X_NULL, NULL) -- or (NULL, NULL) and (X_NULL, NULL) -- hash
    alike for every unit; the first key decides, NULL last: (X_NULL, NULL) is kept. Bins in
    the domain's product order: (X, X), (X, NULL), (NULL, X), (NULL, NULL)."""
    q = Query("SELECT k, k2, COUNT(*) FROM visits GROUP BY k, k2", TIE_MD)
    path = _tie_db(tmp_path / "t.duckdb", rows)
    assert q.exact(path)[0].tolist() == [0, 1, 0, 0]


@pytest.mark.parametrize("setting", ["default_order='DESC'",
                                     "default_null_order='nulls_first'"])
def test_the_choice_does_not_depend_on_the_instances_default_order(tmp_path, setting):
    """An instance of the same file opened first in the process with a default order
    (tests/redteam/float_sums.opened does so for threads): DESC keeps each unit's LARGEST
    hash, nulls_first lets NULL win the X_NULL tie. Still each unit's own choice (no privacy
    loss), but not the documented rule: dpsql.backends.duckdb._lock_down pinned
    default_collation for this reason and not these two (FIXED: it pins all three).
    Unit 1: groups X_NULL, NULL (tied); unit 2: groups 7, 9 (one kept by its hash alone)."""
    sql = "SELECT k, COUNT(*) FROM visits GROUP BY k"
    path = make_db(tmp_path / "o.duckdb", {
        "people": (["pid INTEGER"], [(1,), (2,)]),
        "dom": (["d BIGINT"], [(X_NULL,), (7,), (9,), (None,)]),
        "visits": (["v_pid INTEGER", "k BIGINT", "k2 BIGINT"],
                   [(1, X_NULL, 0), (1, None, 0), (2, 7, 0), (2, 9, 0)])})
    q = Query(sql, TIE_MD)
    plain = q.exact(path)

    pre = duckdb.connect(str(path), read_only=True)
    try:
        pre.execute(f"SET {setting}")
        from dpsql.backends.duckdb import DuckDBBackend

        backend = DuckDBBackend(path, TIE_MD)
        try:
            configured = q.read(backend)
        finally:
            backend.close()
        order = [r[0] for r in pre.execute("SELECT d FROM dom ORDER BY d").fetchall()]
    finally:
        pre.close()
    # compare the released (value -> count) maps: the bins' order may follow the setting
    # (the bins follow the domain as the instance orders it: read that order the same way)
    def released(values: list[np.ndarray], order: list[Any]) -> dict[Any, int]:
        return dict(zip(order, values[0].tolist(), strict=True))

    assert released(plain, [X_NULL, 7, 9, None]) == {X_NULL: 1, 7: 1, 9: 0, None: 0}
    assert released(plain, [X_NULL, 7, 9, None]) == released(configured, order)


# ------------------------------------------------------------------------------- 4. Spark

SPARK_CASES = [("VARCHAR", "DOUBLE")]


@pytest.mark.spark
@pytest.mark.parametrize(("t1", "t2"), SPARK_CASES)
def test_spark_moves_the_bins_by_at_most_kappa_c_w(tmp_path, spark, t1, t2):
    """HELD on Spark (Murmur3, 32 bits, NULL arguments skipped): a random database (kappa 1,
    C 2, keys VARCHAR and DOUBLE with '', NULL, -0.0, NaN), removing one unit: L1 <= kappa * C
    * w. (Two units, and DOUBLE x BIGINT and BIGINT x VARCHAR, ran clean too; one case kept:
    Spark reads cost ~1.5 s each, on the one worker every Spark test shares.)"""
    q = Query(QUERIES[1], world(t1, t2, 1, 2))
    bound = claims(q, 1, 2)
    rng = random.Random(f"{SEED}:spark:{t1}")
    db = random_db(rng, t1, t2)
    while len(units(db)) < 2:
        db = random_db(rng, t1, t2)

    def on_spark(name: str, x: Db) -> list[np.ndarray]:
        path = make_db(tmp_path / f"{name}.duckdb", tables(t1, t2, x))
        return q.on_spark(path, tmp_path / name, spark)

    base = on_spark("base", db)
    for u in units(db)[:1]:
        moved = l1(base, on_spark(f"without{u}", remove_unit(db, u)))
        assert all(m <= b for m, b in zip(moved, bound, strict=True)), (u, moved, db)


@pytest.mark.spark
def test_spark_breaks_its_null_skipping_hash_tie_by_the_keys(tmp_path, spark):
    """HELD on Spark: its hash skips NULL arguments, so hash(u, NULL, 5) = hash(u, 5, NULL) =
    hash(u, 5) for every unit u (checked); the keys break the tie (NULLS LAST, explicit in the
    Spark SQL), so (5, NULL) is kept in either storage order."""
    assert len({r for r in spark.sql("SELECT hash(3, NULL, 5L), hash(3, 5L, NULL)").first()}) == 1
    q = Query("SELECT k, k2, COUNT(*) FROM visits GROUP BY k, k2", TIE_MD)
    out = []
    for i, rows in enumerate([[(1, None, 5), (1, 5, None)], [(1, 5, None), (1, None, 5)]]):
        path = make_db(tmp_path / f"s{i}.duckdb", {
            "people": (["pid INTEGER"], [(1,)]), "dom": (["d BIGINT"], [(5,), (None,)]),
            "visits": (["v_pid INTEGER", "k BIGINT", "k2 BIGINT"], rows)})
        out.append(q.on_spark(path, tmp_path / f"s{i}", spark))
    assert same(out)
    assert out[0][0].tolist() == [0, 1, 0, 0]  # (5, 5), (5, NULL), (NULL, 5), (NULL, NULL)


@pytest.mark.parametrize("setting", ["default_order='DESC'",
                                     "default_null_order='nulls_first'"])
def test_an_instance_locked_with_another_default_order_is_refused(tmp_path, setting):
    """The fix's other half: an instance of the file already open in the process with another
    default order AND its configuration locked cannot be pinned, so the backend refuses it
    (as it refuses a locked default collation) instead of running under that order."""
    from dpsql.backends.duckdb import DuckDBBackend
    from dpsql.errors import OperationalError

    path = make_db(tmp_path / "l.duckdb", {"people": (["pid INTEGER"], [(1,)]),
                                           "visits": (["v_pid INTEGER", "k BIGINT",
                                                       "k2 BIGINT"], [(1, 7, 0)])})
    pre = duckdb.connect(str(path), read_only=True)
    try:
        pre.execute(f"SET {setting}")
        pre.execute("SET enable_external_access=false")  # else refused for that first
        pre.execute("SET lock_configuration=true")
        with pytest.raises(OperationalError, match="default sort order"):
            DuckDBBackend(path, TIE_MD)
    finally:
        pre.close()
