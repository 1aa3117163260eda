"""Red team (issue #17): dpsql at numeric extremes, row level (bounds near +-1.8e308 and
5e-324, lo == hi; DOUBLE, DECIMAL(38, 2), HUGEINT, BIGINT near 2^63; NaN / +-inf / NULL in
the data; epsilon and delta from 5e-324 to 1.7e308; max_freq 1 and 2^63; parameters bound to
huge, tiny, NaN and infinite values; partition selection).

The rules checked: a refusal reads only the SQL, the public metadata and epsilon/delta (the
same outcome for neighbouring databases, one row apart, and for max frequencies 1 and 2^63);
a user mistake is a PEP 249 error (dpsql.errors), never a traceback.

BROKE (each a strict xfail at first, with its counterexample; fixed in the next commit, which
turned them into the plain tests of the section "breaks"):

* **epsilon 5e-324 split over two measurements** (AVG, STDDEV): ``epsilon / n`` underflows
  to 0 and ``gridded_sum_scale`` divides by it: ``ZeroDivisionError`` (not PEP 249).
* **delta 5e-324 on a join** (smoothed): ``2 / delta`` is inf, beta = log1p(eps / inf) = 0,
  and ``smooth`` divides by beta: ``ZeroDivisionError`` (not PEP 249).
* **epsilon >= ~1e299 on a smoothed COUNT** (a join): ``count_window`` floors
  ``epsilon * 2^32 / 2`` = inf: ``OverflowError`` (not PEP 249).
* **two units at epsilon 5e-324** (customer AND supplier; the flat read and the fallback
  alike): ``SUM(qty)`` -> ``ValueError: epsilon must be a finite number > 0`` (the split over
  the parts underflows to 0 in dpsql.units.noise); ``COUNT(*)`` at max_contribution 2^62 ->
  ``ZeroDivisionError`` (R2T's per-level share underflows in dpsql.noise.r2t_plans). Not PEP
  249.
* **the Gaussian at epsilon >= ~710** (1e6, 1e300, 1.7e308): ``discrete_delta`` computes
  ``math.expm1(epsilon)``: ``OverflowError`` (not PEP 249).
* **epsilon=10**400 (a Python int)**: ``Budget`` calls ``math.isfinite`` on it:
  ``OverflowError`` (not PEP 249).
* **epsilon 1e300, delta 1e-300, a smoothed SUM over a join**: with max_freq 1 the release
  is ok; with max_freq 2^63 (S capped to the public window) ``release_sums`` raises
  ``ValueError: scale / granularity exceeds MAX_DISCRETE_SCALE`` -- the largest scale of the
  window rounds one ulp past 2^32 grid steps. An outcome that depends on a max frequency
  (owner-only), and not PEP 249.

FIXED after the report (was a strict xfail): **a SUM at epsilon >= ~1e299 is silently saturated**:
at bounds [0, 10] its grid g is ~2^-1013 and release_sums clamps every sum into
[-g 2^1000, g 2^1000] = +-2^-13, so SUM(v) = 145 is released as 0.000122 without an error.
Public (no privacy issue), but a wrong answer with no warning.

HELD (plain tests below): bounds [0, 1.7e308], [-1.7e308, 1.7e308], [0, 5e-324],
[-5e-324, 5e-324], [3, 3], [1e300, 1e300], [-1e308, -1e300], [0, 1e200] on DOUBLE (and
[0, 1e18] / [-9.2e18, 9.2e18] on DECIMAL(38, 2), HUGEINT, BIGINT) under SUM, AVG, VARIANCE,
STDDEV, GROUP BY, a join, SUM(v * 1e300), SUM(CAST(v AS INTEGER)), SUM(b * b), with a NaN,
+-inf, NULL or +-1.7e308 / 2^126 / 2^63 - 1 / 10^35 row added: one outcome over both
neighbours and max_freq 1 and 2^63, every refusal PEP 249; epsilon 5e-324 .. 1.7e308 and delta
1e-300 .. 1 - 2^-53 on one measurement (with partition selection too); invalid budgets
(0, -1, NaN, inf, delta 1, True) are ProgrammingErrors; parameters 1e308, 5e-324, NaN, +-inf,
2^63, 2^64, 10^40, NULL in WHERE / HAVING / LIMIT / inside SUM. Probed but not kept (too slow
for the budget; scripts in the report): one unit (max_contribution 2 and 2^62, levels base
2^31 and 1e6, max_groups / max_rows_per_group 2^62, max_sum 1 and 2^62, amount bounds to
+-1.7e308, 5e-324, lo == hi, HUGEINT / BIGINT) over the unit's removal at 4 epsilons; two
units with the flat read and the fallback (FLAT_ROWS 0); joins of 2, 4 and 6 private tables
at max_freq 1, 2^53 + 1 and 2^63 (bounds 10 and 1e300, epsilon 1e-12 .. 1e300).
``DPSQL_REDTEAM_DEEP=1`` runs the full sweeps (~4 minutes); by default a sample (~3 s).
"""

from __future__ import annotations

import itertools
import math
import os
import random
from pathlib import Path
from typing import Any

import pytest

from dpsql.errors import Error
from dpsql.metadata import Metadata, loads_metadata
from dpsql.units import multi_execute
from tests.db_files import insert_many, writing
from tests.neighbours import cached_engine, neighbour_pair, write_database
from tests.units import tiny_multi

DEEP = os.environ.get("DPSQL_REDTEAM_DEEP") == "1"

SCHEMA = ["CREATE TABLE t (k INTEGER, v DOUBLE, d DECIMAL(38,2), h HUGEINT, b BIGINT)",
          "CREATE TABLE u (k INTEGER, w DOUBLE)"]
ROWS: dict[str, list[tuple[Any, ...]]] = {
    "t": [(i % 3, float(i), i, i, i) for i in range(20)],
    "u": [(i % 3, 1.0) for i in range(10)]}
#: the row the second neighbour adds
EXTRAS: dict[str, tuple[Any, ...]] = {
    "plain": (1, 5.0, 1, 1, 1),
    "nan": (1, float("nan"), 1, 1, 1),
    "inf": (1, float("inf"), 1, 1, 1),
    "-inf": (1, float("-inf"), 1, 1, 1),
    "null": (1, None, None, None, None),
    "huge": (1, 1.7e308, 10**35, 2**126, 2**63 - 1),
    "-huge": (1, -1.7e308, -10**35, -2**127, -2**63),
}
MAX_FREQS = (1, 2**63)


def _num(x: float) -> str:
    return f"{x:.17e}"  # YAML 1.1 reads 1e17 as text


def metadata(mf: int, bounds: tuple[float, float] = (0.0, 10.0),
             int_bounds: tuple[float, float] = (0.0, 1.0e3), *,
             partition_selection: bool = False) -> Metadata:
    lo, hi = map(_num, bounds)
    ilo, ihi = map(_num, int_bounds)
    k_extra = ("partition_selection: true" if partition_selection
               else "domain: {values: [0, 1, 2]}")
    return loads_metadata(f"""
tables:
  t:
    columns:
      k: {{max_freq: {mf}, type: INTEGER, releasable: true, {k_extra}}}
      v: {{type: DOUBLE, bounds: [{lo}, {hi}]}}
      d: {{type: 'DECIMAL(38,2)', bounds: [{ilo}, {ihi}]}}
      h: {{type: HUGEINT, bounds: [{ilo}, {ihi}]}}
      b: {{type: BIGINT, bounds: [{ilo}, {ihi}]}}
  u:
    columns:
      k: {{max_freq: {mf}, type: INTEGER}}
      w: {{type: DOUBLE, bounds: [0.0, 1.0]}}
""")


def outcome(path: Path, md: Metadata, sql: str, params: list[Any] | None = None, *,
            epsilon: float = 1.0, delta: float = 1e-6) -> tuple[str, Any]:
    """("ok", rows) or (class, message); a non-PEP 249 exception is an outcome too, marked."""
    try:
        result = cached_engine(path, md).run(sql, list(params or []), epsilon=epsilon, delta=delta)
    except Error as err:
        return type(err).__name__, str(err)
    except Exception as err:  # the attack: anything not PEP 249
        return f"NOT PEP 249: {type(err).__name__}", str(err)
    return "ok", result.rows


def kinds(outcomes: dict[Any, tuple[str, Any]]) -> set[tuple[str, Any]]:
    """The distinct outcomes, rows forgotten (noise is off, but the values differ)."""
    return {(o[0], None if o[0] == "ok" else o[1]) for o in outcomes.values()}


def assert_public_outcome(outcomes: dict[Any, tuple[str, Any]]) -> None:
    found = kinds(outcomes)
    assert len(found) == 1, outcomes
    kind, message = next(iter(found))
    assert not kind.startswith("NOT PEP 249"), outcomes
    assert message is None or ("dpsql bug" not in message
                               and "internal error" not in message.lower()), outcomes


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("extremes")
    out = {}
    for name, row in EXTRAS.items():
        folder = root / name.replace("-", "minus_")
        folder.mkdir()
        out[name] = neighbour_pair(folder, SCHEMA, ROWS, ("t", row))
    return out


def across(pairs: dict[str, tuple[Path, Path]], names: tuple[str, ...], sql: str,
           params: list[Any] | None = None, *, bounds: tuple[float, float] = (0.0, 10.0),
           int_bounds: tuple[float, float] = (0.0, 1.0e3), partition_selection: bool = False,
           epsilon: float = 1.0, delta: float = 1e-6) -> dict[Any, tuple[str, Any]]:
    """The outcomes over both max frequencies and both neighbours of each pair in ``names``."""
    out = {}
    for mf in MAX_FREQS:
        md = metadata(mf, bounds, int_bounds, partition_selection=partition_selection)
        for name in names:
            for i, path in enumerate(pairs[name]):
                out[(mf, name, i)] = outcome(path, md, sql, params, epsilon=epsilon,
                                             delta=delta)
    return out


# --------------------------------------------------------------------------- breaks

JOIN_COUNT = "SELECT COUNT(*) FROM t JOIN u ON t.k = u.k"
JOIN_SUM = "SELECT SUM(t.v) FROM t JOIN u ON t.k = u.k"


def test_a_tiny_epsilon_split_over_measurements_is_a_pep249_refusal(pairs):
    for sql in ("SELECT AVG(v) FROM t", "SELECT STDDEV(v) FROM t"):
        assert_public_outcome(across(pairs, ("plain",), sql, epsilon=5e-324))


def test_a_subnormal_delta_on_a_join_is_a_pep249_refusal(pairs):
    for sql in (JOIN_COUNT, JOIN_SUM):
        assert_public_outcome(across(pairs, ("plain",), sql, epsilon=1.0, delta=5e-324))


def test_a_huge_epsilon_smoothed_count_is_a_pep249_outcome(pairs):
    assert_public_outcome(across(pairs, ("plain",), JOIN_COUNT, epsilon=1e300, delta=1e-6))


def test_a_huge_epsilon_smoothed_sum_reads_no_max_frequency(pairs):
    assert_public_outcome(across(pairs, ("plain",), JOIN_SUM, epsilon=1e300, delta=1e-300))


def test_a_huge_integer_epsilon_is_a_programming_error(pairs):
    found = kinds(across(pairs, ("plain",), "SELECT COUNT(*) FROM t", epsilon=10**400))
    assert {k for k, _ in found} == {"ProgrammingError"}, found


# --------------------------------------------------------------------------- held

QUERIES = ["SELECT SUM(v) FROM t", "SELECT AVG(v) FROM t", "SELECT VARIANCE(v) FROM t",
           "SELECT STDDEV(v) FROM t", "SELECT k, SUM(v) FROM t GROUP BY k",
           "SELECT SUM(v * 1e300) FROM t", "SELECT SUM(CAST(v AS INTEGER)) FROM t",
           "SELECT SUM(d) FROM t", "SELECT SUM(h) FROM t", "SELECT SUM(b) FROM t",
           "SELECT AVG(b) FROM t", JOIN_SUM, "SELECT AVG(t.v) FROM t JOIN u ON t.k = u.k",
           "SELECT SUM(b * b) FROM t", "SELECT SUM(CAST(b AS INTEGER)) FROM t",
           "SELECT SUM(h * h) FROM t", "SELECT VARIANCE(b) FROM t",
           "SELECT STDDEV(t.v) FROM t JOIN u ON t.k = u.k"]
BOUNDS = [(0.0, 1.7e308), (-1.7e308, 1.7e308), (0.0, 5e-324), (-5e-324, 5e-324), (3.0, 3.0),
          (1e300, 1e300), (-1e308, -1e300), (0.0, 1e200)]
INT_BOUNDS = [(0.0, 1e18), (-9.2e18, 9.2e18)]
#: the default sample: each query once, at bounds and extra rows that vary with it
_ALL = list(itertools.product(BOUNDS, INT_BOUNDS, QUERIES))
CASES = _ALL if DEEP else _ALL[::72]


@pytest.mark.parametrize(("bounds", "int_bounds", "sql"), CASES)
def test_extreme_bounds_give_one_public_outcome(pairs, bounds, int_bounds, sql):
    # the neighbours add a NaN, an infinity, a NULL, a value near the largest double (and
    # HUGEINT 2^126, BIGINT 2^63 - 1, DECIMAL 10^35); max_freq 1 and 2^63
    names = tuple(EXTRAS) if DEEP else ("nan", "huge")
    assert_public_outcome(across(pairs, names, sql, bounds=bounds, int_bounds=int_bounds))


def test_bounds_near_the_largest_double_are_refused_with_the_fix(pairs):
    found = kinds(across(pairs, ("huge",), "SELECT VARIANCE(v) FROM t",
                         bounds=(0.0, 1.7e308)))
    assert {k for k, _ in found} == {"UnsupportedConstructError"}
    assert all("declare bounds" in m for _, m in found)


EPSILONS = [5e-324, 1e-300, 1e-12, 1e6, 1e300, 1.7e308]
DELTAS = [1e-300, 1e-12, 0.999999, 1 - 2**-53]
EPS_QUERIES = ["SELECT COUNT(*) FROM t", "SELECT SUM(v) FROM t",
               "SELECT k, COUNT(*) FROM t GROUP BY k", "SELECT k, SUM(v) FROM t GROUP BY k"]
#: one measurement, no join: every epsilon and delta the budget accepts gives one outcome
_EPS_ALL = list(itertools.product(EPSILONS, DELTAS, EPS_QUERIES, [False, True]))


@pytest.mark.parametrize(("epsilon", "delta", "sql", "selection"),
                         _EPS_ALL if DEEP else _EPS_ALL[::64])
def test_extreme_epsilon_and_delta_on_one_measurement(pairs, epsilon, delta, sql, selection):
    assert_public_outcome(across(pairs, ("plain",), sql, partition_selection=selection,
                                 epsilon=epsilon, delta=delta))


@pytest.mark.parametrize(("epsilon", "delta"), [
    (0.0, 0.0), (-1.0, 0.0), (math.nan, 0.0), (math.inf, 0.0), (1.0, math.nan), (1.0, 1.0),
    (1.0, -1e-300), (1.0, math.inf), (True, 0.0)])
def test_invalid_budgets_are_programming_errors(pairs, epsilon, delta):
    # checked before any read: one database and one max frequency suffice
    found = outcome(pairs["plain"][0], metadata(1), "SELECT COUNT(*) FROM t", epsilon=epsilon,
                    delta=delta)
    assert found[0] == "ProgrammingError", found


PARAM_QUERIES = ["SELECT COUNT(*) FROM t WHERE v > ?", "SELECT SUM(v) FROM t WHERE v < ?",
                 "SELECT k, COUNT(*) FROM t GROUP BY k HAVING COUNT(*) > ?",
                 "SELECT SUM(v + ?) FROM t", "SELECT SUM(LEAST(GREATEST(v * ?, 0), 1)) FROM t",
                 "SELECT COUNT(*) FROM t WHERE b = ?", "SELECT COUNT(*) FROM t WHERE h > ?",
                 "SELECT COUNT(*) FROM t WHERE d > ?", "SELECT COUNT(*) FROM t LIMIT ?",
                 "SELECT COUNT(*) FROM t WHERE CAST(v AS INTEGER) > ?"]
PARAMS = [1e308, -1e308, 5e-324, math.nan, math.inf, -math.inf, 2**63, 2**64, 10**40,
          -2**63 - 1, None]
_PARAM_ALL = list(itertools.product(PARAM_QUERIES, PARAMS, [False, True]))


@pytest.mark.parametrize(("sql", "param", "selection"),
                         _PARAM_ALL if DEEP else _PARAM_ALL[::55])
def test_extreme_parameters_give_one_public_outcome(pairs, sql, param, selection):
    assert_public_outcome(across(pairs, ("huge",), sql, [param],
                                 partition_selection=selection))


# --------------------------------------------------------------------------- privacy units


def _write_multi(path: Path, db: dict[str, list[tuple[Any, ...]]]) -> Path:
    with writing(path) as con:
        for table, columns in tiny_multi.COLUMNS.items():
            con.execute(f"CREATE TABLE {table} ({', '.join(c + ' INTEGER' for c in columns)})")
            if db[table]:
                insert_many(con, table, db[table])
    return path


@pytest.fixture(scope="module")
def multi_pair(tmp_path_factory) -> tuple[Path, Path]:
    """A two-unit shop (customer AND supplier) and its neighbour without one customer."""
    root = tmp_path_factory.mktemp("extremes_multi")
    db = tiny_multi.random_database(random.Random(3))
    customer = db["customer"][0][0]
    return (_write_multi(root / "with.duckdb", db),
            _write_multi(root / "without.duckdb", tiny_multi.remove_customer(db, customer)))


@pytest.mark.parametrize("flat_rows", [None, 0])
def test_two_units_at_a_subnormal_epsilon_refuse_with_pep249(multi_pair, monkeypatch, flat_rows):
    if flat_rows is not None:
        monkeypatch.setattr(multi_execute, "FLAT_ROWS", flat_rows)
    for md, sql in ((tiny_multi.metadata(), "SELECT SUM(qty) FROM items"),
                    (tiny_multi.metadata(max_contribution=2**62), "SELECT COUNT(*) FROM items")):
        found = {i: outcome(p, md, sql, epsilon=5e-324, delta=1e-6)
                 for i, p in enumerate(multi_pair)}
        assert_public_outcome(found)


def test_two_units_at_a_huge_epsilon_agree_on_neighbours(multi_pair):
    md = tiny_multi.metadata(max_contribution=2**62)
    for sql, epsilon in itertools.product(
            ("SELECT SUM(qty) FROM items", "SELECT COUNT(*) FROM items"),
            (1e300,) + ((1.0, 1e-12) if DEEP else ())):
        assert_public_outcome({i: outcome(p, md, sql, epsilon=epsilon, delta=1e-6)
                               for i, p in enumerate(multi_pair)})


# --------------------------------------------------------------------------- the Gaussian


def gaussian_outcome(path: Path, md: Metadata, sql: str, epsilon: float,
                     delta: float) -> tuple[str, Any]:
    try:
        result = cached_engine(path, md).run(sql, [], epsilon=epsilon, delta=delta,
                                      mechanism="gaussian")
    except Error as err:
        return type(err).__name__, str(err)
    except Exception as err:  # the attack: anything not PEP 249
        return f"NOT PEP 249: {type(err).__name__}", str(err)
    return "ok", result.rows


@pytest.mark.parametrize(("epsilon", "delta"), [(1e6, 1e-6), (1e300, 1e-300), (1.7e308, 0.5)])
def test_a_huge_epsilon_gaussian_is_a_pep249_outcome(pairs, epsilon, delta):
    for sql in ("SELECT COUNT(*) FROM t", "SELECT SUM(v) FROM t"):
        # no join: no max frequency is read (DEEP: both anyway)
        mfs = MAX_FREQS if DEEP else (2**63,)
        assert_public_outcome({(mf, i): gaussian_outcome(p, metadata(mf), sql, epsilon, delta)
                               for mf in mfs for i, p in enumerate(pairs["plain"])})


# --------------------------------------------------------------------------- silent saturation


# was a strict xfail: 145 released as 2^-13 at epsilon 1e300. Now every sum's epsilon per draw
# is at most 2^900 (mechanisms.MAX_SUM_EPSILON), where sums saturate no lower than ~2^80 times
# the bound: above it, a refusal naming the limit (public: epsilon alone)
def test_a_huge_epsilon_sum_is_not_silently_saturated(pairs):
    for epsilon in (1e299, 1e300):
        kind, rows = outcome(pairs["plain"][0], metadata(1), "SELECT SUM(v) FROM t",
                             epsilon=epsilon, delta=0.0)
        assert kind != "ok" or rows == [(145.0,)], (epsilon, kind, rows)
        assert kind == "EpsilonTooLargeForSum" and "at most 2^900" in rows, (epsilon, rows)
    for sql in ("SELECT AVG(v) FROM t", "SELECT SUM(v) FROM t"):  # at 1e270, released whole
        kind, rows = outcome(pairs["plain"][0], metadata(1), sql, epsilon=1e270, delta=0.0)
        assert kind == "ok" and rows == [(145.0 if "SUM" in sql else 7.25,)], (sql, rows)


def test_a_sums_overflowing_bounds_are_named_without_variance(tmp_path):
    # the refusal of SUM over [-1.7e308, 1.7e308] said "VARIANCE and STDDEV square the
    # declared range" (the report's message 1): a SUM's width itself overflows
    path = write_database(tmp_path / "w.duckdb", ["CREATE TABLE t (v DOUBLE)"], {"t": [(1.0,)]})
    md = loads_metadata("tables:\n  t: {columns: {v: {type: DOUBLE, "
                        "bounds: [-1.7e+308, 1.7e+308]}}}\n")
    kind, message = outcome(path, md, "SELECT SUM(v) FROM t", epsilon=1.0, delta=0.0)
    assert kind == "UnsupportedConstructError" and "VARIANCE" not in message
    assert "upper minus lower" in message and "rescale the column" in message
