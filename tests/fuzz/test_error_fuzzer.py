"""The differential error fuzzer (issue #12): no query may have an outcome that tells two
neighbouring databases apart, other than through its noisy values.

Queries come from ``tests/fuzz/grammar.py``; databases from ``tests/fuzz/worlds.py``: a base,
neighbours each adding one extreme row of a private table (or one row of the other one), and a
copy that differs only in an undeclared column. The analyst-visible outcome (success with the
released group labels, or the exception class and message) must be identical on all of them and
on a second metadata file whose max frequencies differ (they are not public). Beyond outcomes,
no exact (noise-free) bin may move by more than the analysis's ES(0) between the base and a
neighbour, nor at all on the undeclared-column copy; the values themselves legitimately differ.
For SAMPLE_AGGREGATE the "bins" are the clamped block sums under one fixed key, and ES(0) is
the release's 2 (hi - lo).

Every session charges its own ledger file, as every real client's does, so the checks a
charging session runs before the charge (the binder's, the post-processing's) are among the
outcomes compared.

The same queries also run under a privacy unit (``worlds.unit_metadata``; outcomes only: the
unit-level bounds are brute-forced in ``test_units_grammar_bruteforce.py``).

Bounded for CI (fixed seed, ``FUZZ_EXAMPLES`` examples, ~20 s); a longer run:
``DPSQL_FUZZ_EXAMPLES=5000 python -m pytest tests/fuzz``. A failure prints the query, its
parameters and both outcomes; hypothesis shrinks it to a minimal one first.
"""

from __future__ import annotations

import math
import os
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dpsql.analysis.selection_aggregates import QuantileQuery
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget import Budget
from dpsql.errors import Error
from dpsql.execute.blocks import PreparedBlocks
from dpsql.execute.exact import read_exact, read_groups
from dpsql.execute.public import PreparedPublic
from dpsql.execute.selection import PreparedSelection, cell_counts, quantile_utilities
from dpsql.noise import optimal_partition
from dpsql.noise.partition import plan_with_selection
from dpsql.sample_aggregate.prepared import PreparedSampleAggregate
from dpsql.sample_aggregate.release import block_answers, clamped_sums, plan_release
from dpsql.session import Prepared, Session
from tests.fuzz import worlds
from tests.fuzz.grammar import Query, queries, two_unit_queries, unit_queries
from tests.ledgers import ledger_session, open_ledger
from tests.shop_fixture import ZeroNoise

FUZZ_EXAMPLES = int(os.environ.get("DPSQL_FUZZ_EXAMPLES", "150"))
SETTINGS = settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _charging(md, path, ledger_path) -> Session:
    """A session charging its own ledger file, as every real client's does: the checks a
    charging session runs before the charge (the binder's, the post-processing's over typed
    keys, dpsql.execute.post_check) are refusals too, and must not tell neighbours apart
    (the units QA found one that a ledger-less fuzzer never ran)."""
    ledger = open_ledger(ledger_path, epsilon=1e6, delta=0.5)
    return ledger_session(md, DuckDBBackend(path, md), ledger, sampler=ZeroNoise())


def _close(engines: dict[str, Session]) -> None:
    for engine in engines.values():
        engine.backend.close()
        if engine.ledger is not None:
            engine.ledger.close()


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """One charging Session per database (base first), and the base under a second metadata
    file whose max frequencies differ."""
    folder = tmp_path_factory.mktemp("fuzz")
    base, neighbours, csv = worlds.build(folder)
    out = {}
    for name, path in [("base", base), *neighbours.items()]:
        out[name] = _charging(worlds.metadata(csv), path, folder / f"{name}.ledger")
    out["mf"] = _charging(worlds.metadata(csv, mf=worlds.MAX_FREQS[1]), base,
                          folder / "mf.ledger")
    yield out
    _close(out)


@pytest.fixture(scope="module")
def unit_engines(tmp_path_factory):
    """:func:`engines` under a privacy unit (worlds.unit_metadata): the executed queries
    group by the unit, looked up along t's path, and bound each unit (dpsql.units)."""
    folder = tmp_path_factory.mktemp("fuzz_units")
    base, neighbours, csv = worlds.build(folder)
    out = {}
    for name, path in [("base", base), *neighbours.items()]:
        out[name] = _charging(worlds.unit_metadata(csv), path, folder / f"{name}.ledger")
    out["mf"] = _charging(worlds.unit_metadata(csv, mf=worlds.MAX_FREQS[1]), base,
                          folder / "mf.ledger")
    yield out
    _close(out)


@pytest.fixture(scope="module")
def two_unit_engines(tmp_path_factory):
    """:func:`unit_engines` under two unit tables (worlds.two_unit_metadata): queries reading
    t reach both units and run the per-pair query and the max-flow truncation
    (dpsql.units.multi)."""
    base, neighbours, csv = worlds.build(tmp_path_factory.mktemp("fuzz_two_units"))
    out = {}
    for name, path in [("base", base), *neighbours.items()]:
        md = worlds.two_unit_metadata(csv)
        out[name] = Session(md, DuckDBBackend(path, md), sampler=ZeroNoise())
    yield out
    for engine in out.values():
        engine.backend.close()


def outcome(engine: Session, query: Query, epsilon: float) -> tuple[str, object]:
    """("ok", the released group labels) or (error class, message): what may not differ."""
    try:
        result = engine.run(query.sql, list(query.params), epsilon=epsilon, delta=1e-6,
                            mechanism=query.mechanism)
    except Error as err:
        return type(err).__name__, str(err)
    if not query.labels:  # top-k: the labels are chosen by noise, their number is public
        return "ok", len(result.rows)
    # the grammar puts the group key first; its labels come from the declared domain alone
    if " GROUP BY " not in query.sql:
        return "ok", None
    labels = [row[0] for row in result.rows]
    # ordered by a released count, the order is the noise's (the exact counts under zero noise)
    return "ok", sorted(labels, key=repr) if query.noisy_order else labels


def _exact(engine: Session, query: Query) -> tuple[list[float], list[np.ndarray]]:
    """ES(0) and the exact (clamped, noise-free) bins of every measurement. Groups selected
    from the data (partition selection) differ between neighbours: their bins are aligned on
    every key the worlds can hold (``_GROUPS``), 0 where a group is absent."""
    prepared = engine.prepare(query.sql)
    if isinstance(prepared, PreparedPublic):
        # released exactly, public tables only: ES 0, the whole answer may not move at all
        rows = engine.run(query.sql, list(query.params)).rows
        return [0.0], [np.array([float(zlib.crc32(repr(rows).encode()))])]
    if isinstance(prepared, PreparedSelection):
        return _selection_exact(engine, prepared, query)
    if isinstance(prepared, Prepared) and prepared.plan.selected:
        bins = read_exact(engine.backend, prepared.compiled, list(query.params))
        keys = list(zip(*bins.keys, strict=True))
        es = [m.sensitivity.at(0) for m in prepared.analysis.measurements]
        out = []
        for column in bins.exact:
            by_key = dict(zip(keys, np.asarray(column, dtype=np.float64).tolist(),
                              strict=True))
            out.append(np.array([by_key.get(k, 0.0) for k in _groups(engine, query)]))
        return es, out
    if isinstance(prepared, PreparedSampleAggregate):  # the clamped block sums, one key
        outputs, _ = plan_release(prepared.plan, Budget(1.0), prepared.fingerprint)
        rows, _ = engine.backend.execute(prepared.compiled,
                                         prepared.bindings(list(query.params), 12345))
        answers = block_answers(rows, prepared.plan.blocks, len(outputs))
        sums = clamped_sums(answers, outputs)
        return [o.sensitivity for o in outputs], [np.array([v]) for v in sums]
    if isinstance(prepared, PreparedBlocks):  # every release (the final one's scalars: 0.0)
        es: list[float] = []
        exact: list[np.ndarray] = []
        for part in prepared.parts:
            bins = read_exact(engine.backend, part.compiled,
                              prepared.part_params(list(query.params)))
            es += [m.sensitivity.at(0) for m in part.analysis.measurements]
            exact += [np.asarray(b, dtype=np.float64) for b in bins.exact]
        return es, exact
    bins = read_exact(engine.backend, prepared.compiled, list(query.params))
    es = [m.sensitivity.at(0) for m in prepared.analysis.measurements]
    return es, [np.asarray(b, dtype=np.float64) for b in bins.exact]


def _selection_exact(engine: Session, prepared: PreparedSelection,
                     query: Query) -> tuple[list[float], list[np.ndarray]]:
    """A selection query's (bound, values) pairs: per quantile, its utilities (each may move
    by at most the claimed sensitivity); for top-k, the counts (by at most S)."""
    bins = read_exact(engine.backend, prepared.compiled, list(query.params))
    chosen = prepared.query
    if isinstance(chosen, QuantileQuery):
        counts = cell_counts(bins, chosen.grid.cells)
        return ([chosen.sensitivity] * len(chosen.aggregates),
                [quantile_utilities(counts, a).ravel() for a in chosen.aggregates])
    return [chosen.sensitivity], [np.asarray(bins.exact[0], dtype=np.float64)]


_GROUP_KEYS: dict[str, list[tuple]] = {}


def _groups(engine: Session, query: Query) -> list[tuple]:
    """Every group key of ``query`` over the base and each neighbour (computed once per query
    from the keys the worlds' exact reads return; a fixed order)."""
    return _GROUP_KEYS[query.sql]


def _collect_groups(engines, query: Query) -> None:
    prepared = engines["base"].prepare(query.sql)
    if not (isinstance(prepared, Prepared) and prepared.plan.selected):
        return
    keys: set[tuple] = set()
    for engine in engines.values():
        bins = read_exact(engine.backend, engine.prepare(query.sql).compiled,
                          list(query.params))
        keys |= set(zip(*bins.keys, strict=True))
    _GROUP_KEYS[query.sql] = sorted(keys, key=repr)


def _check(engines, query: Query, epsilon: float, *, sensitivity: bool = False) -> None:
    expected = outcome(engines["base"], query, epsilon)
    if sensitivity and expected[0] == "ok":
        _collect_groups(engines, query)
    base_exact = _exact(engines["base"], query) if sensitivity and expected[0] == "ok" else None
    for name, engine in engines.items():
        if name == "base":
            continue
        got = outcome(engine, query, epsilon)
        assert got == expected, (
            f"neighbour {name!r} tells the databases apart\n  query: {query.sql}\n"
            f"  params: {query.params!r}\n  base: {expected}\n  {name}: {got}")
        if base_exact is not None and name != "mf":
            # the same neighbours bound the values: no bin moves by more than ES(0)
            es, base_bins = base_exact
            for j, (bound, a, b) in enumerate(zip(es, base_bins, _exact(engine, query)[1],
                                                  strict=True)):
                moved = float(np.max(np.abs(a - b), initial=0.0))
                if name == worlds.UNDECLARED:  # undeclared data may not count at all
                    bound = 0.0
                assert moved <= bound * (1 + 1e-9) + 1e-9, (
                    f"PRIVACY BUG: measurement {j} moves by {moved} > ES(0) = {bound}\n"
                    f"  query: {query.sql}\n  params: {query.params!r}\n  neighbour: {name}")


@SETTINGS
@given(query=queries())
def test_outcomes_never_tell_neighbours_apart(engines, query):
    _check(engines, query, epsilon=1.0, sensitivity=True)
    # and at 1e-4, where a join's smoothed scale used to cross the sampler's limit for one
    # metadata file and not the other (hole class 6): the same query, analysed once
    _check({"base": engines["base"], "mf": engines["mf"]}, query, epsilon=1e-4)


#: the privacy-unit variant draws fewer queries (most touch u off t's path: refused early)
UNIT_SETTINGS = settings(max_examples=max(FUZZ_EXAMPLES // 4, 10), deadline=None,
                         derandomize=True,
                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@UNIT_SETTINGS
@given(query=queries())
def test_outcomes_under_a_privacy_unit_never_tell_neighbours_apart(unit_engines, query):
    """The same grammar under a privacy unit (issue #17): the unit lookups (LEFT JOIN to
    u's key), the per-unit GROUP BY, R2T's truncations (LEAST / COALESCE / casts) and the
    two-stage ranking (hash, ROW_NUMBER) may not fail on one neighbour only; refusals read
    the SQL and the metadata alone."""
    _check(unit_engines, query, epsilon=1.0)


@settings(max_examples=max(FUZZ_EXAMPLES // 12, 6), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(query=two_unit_queries())
def test_unit_counts_read_flat_never_tell_neighbours_apart(unit_engines, query):
    """A COUNT(*) the one-unit world releases (t alone, joined to u, or with an EXISTS over
    u; the grammar's predicates) with its unit ids read one per row, as over many units
    (dpsql.units.flat_counts: the guarded flat read, the ids' coding and counting), may not
    fail on one neighbour only."""
    from dpsql.units import execute as unit_execute

    count = Query("SELECT COUNT(*)" + query.sql[query.sql.index(" FROM "):], query.params,
                  query.mechanism)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(unit_execute, "many_units", lambda backend, release: True)
        _check(unit_engines, count, epsilon=1.0)


@settings(max_examples=max(FUZZ_EXAMPLES // 8, 6), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(query=queries())
def test_outcomes_under_two_units_never_tell_neighbours_apart(two_unit_engines, query):
    """The same grammar under two unit tables: the per-pair query (both ids looked up), its
    columns' fetch and the flow truncation may not fail on one neighbour only; the two-unit
    refusals (GROUP BY, subquery aggregates, a unit reached only in a subquery) read the SQL
    and the metadata alone."""
    _check(two_unit_engines, query, epsilon=1.0)


@settings(max_examples=max(FUZZ_EXAMPLES // 12, 6), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(query=two_unit_queries(), guard=st.sampled_from(["flat", "fallback"]))
def test_two_unit_releases_never_tell_neighbours_apart(two_unit_engines, query, guard):
    """Queries the two-unit world releases (the grammar above mostly meets refusals): the flat
    rows, or every flat query past its row guard (FLAT_ROWS 0: the fallback grouped in the
    database, dpsql.units.multi_rewrite.regrouped: a SUM part's floored capacities per level,
    DECIMAL sums, BIGINT casts), and the flow truncation may not fail on one neighbour only."""
    from dpsql.units import multi_execute

    with pytest.MonkeyPatch.context() as patch:
        if guard == "fallback":
            patch.setattr(multi_execute, "FLAT_ROWS", 0)
        _check(two_unit_engines, query, epsilon=1.0)


@UNIT_SETTINGS
@given(query=queries())
def test_unit_outcomes_do_not_depend_on_max_frequencies_at_tiny_epsilon(unit_engines, query):
    # under a unit no bound reads a max frequency (dpsql.units.analysis.structural_metadata
    # keeps the declared ones for the query's shape only): refusals may not depend on them
    _check({"base": unit_engines["base"], "mf": unit_engines["mf"]}, query, epsilon=1e-4)


# --------------------------------------------------------------- partition selection under a unit

#: the unit world of worlds.metadata(..., unit=True), where t is its own unit table
UNIT_PARTITION_SETTINGS = settings(SETTINGS, max_examples=max(1, FUZZ_EXAMPLES // 5))


@pytest.fixture(scope="module", params=[2, 1], ids=["kappa2", "kappa1"])
def partition_unit_engines(tmp_path_factory, request):
    """The same worlds under a privacy unit (worlds.UNIT): each extreme neighbour adds one
    unit; ``u_row`` changes one (its values are not bounded by one step). At max_groups 1 a
    selection without a shared COUNT(*) is the optimal mechanism (its words: U = 1/2)."""
    kappa = request.param
    base, neighbours, csv = worlds.build(tmp_path_factory.mktemp("fuzz_unit"))
    md = worlds.metadata(csv, unit=True, max_groups=kappa)
    out = {name: Session(md, DuckDBBackend(path, md), sampler=ZeroNoise())
           for name, path in [("base", base), *neighbours.items()]}
    md_mf = worlds.metadata(csv, mf=worlds.MAX_FREQS[1], unit=True, max_groups=kappa)
    out["mf"] = Session(md_mf, DuckDBBackend(base, md_mf), sampler=ZeroNoise())
    yield out
    for engine in out.values():
        engine.backend.close()


def _unit_groups(engine: Session, query: Query) -> dict[tuple, tuple[int, tuple[float, ...]]]:
    """Every group the selection would see: its key, ``__n`` (kept units) and exact values."""
    prepared = engine.prepare(query.sql)
    assert isinstance(prepared, Prepared)
    groups = read_groups(engine.backend, prepared.compiled, list(query.params))
    keys = list(zip(*groups.keys, strict=True))
    values = list(zip(*(np.asarray(e, dtype=np.float64).tolist() for e in groups.exact),
                      strict=True)) or [()] * len(keys)
    return {k: (int(n), v) for k, n, v in zip(keys, groups.counts.tolist(), values,
                                                strict=True)}


#: key-only releases of the partition-selected t.s (the optimal mechanism at kappa 1)
KEY_ONLY = [Query("SELECT DISTINCT t.s FROM t"),
            Query("SELECT t.s FROM t WHERE t.n > ? GROUP BY t.s", [3]),
            Query("SELECT t.s, SUM(t.n) FROM t GROUP BY t.s")]


@UNIT_PARTITION_SETTINGS
@given(query=st.one_of(unit_queries(), queries()))
@example(query=KEY_ONLY[0])
@example(query=KEY_ONLY[1])
@example(query=KEY_ONLY[2])
def test_selected_groups_under_a_unit_move_by_at_most_kappa(partition_unit_engines, query):
    """Under a privacy unit: the same outcome on every world (refusals read the SQL and the
    metadata alone); for groups selected from the data (partition selection under the unit,
    the grammar's t.s) adding a unit raises each group's ``__n`` by 0 or 1 and kappa in L1,
    creates at most kappa groups (at ``__n`` 1), and moves no measurement by more than the
    two-stage's kappa*C*w in L1; the undeclared copy moves nothing."""
    _check(partition_unit_engines, query, epsilon=1.0)
    if outcome(partition_unit_engines["base"], query, 1.0)[0] != "ok":
        return
    prepared = partition_unit_engines["base"].prepare(query.sql)
    if not (isinstance(prepared, Prepared) and prepared.plan.selected):
        return
    kappa = partition_unit_engines["base"].metadata.privacy_unit.max_groups
    if kappa == 1 and query in KEY_ONLY:  # not vacuous: these draw the optimal mechanism
        _, selection = plan_with_selection(prepared.analysis, Budget(1.0, 1e-6))
        assert selection.mechanism == optimal_partition.MECHANISM, query.sql
    es = [m.sensitivity.at(0) for m in prepared.analysis.measurements]
    small = _unit_groups(partition_unit_engines["base"], query)
    for name, engine in partition_unit_engines.items():
        if name in ("base", "mf", "u_row"):
            continue
        big = _unit_groups(engine, query)
        info = f"\n  query: {query.sql}\n  params: {query.params!r}\n  neighbour: {name}"
        if name == worlds.UNDECLARED:
            assert big == small, f"PRIVACY BUG: undeclared data moved the groups{info}"
            continue
        assert set(small) <= set(big), f"PRIVACY BUG: a unit removed a group{info}"
        created = set(big) - set(small)
        assert len(created) <= kappa and all(big[g][0] == 1 for g in created), (
            f"PRIVACY BUG: one unit created {len(created)} groups{info}")
        moves = [big[g][0] - small.get(g, (0, ()))[0] for g in big]
        assert all(0 <= d <= 1 for d in moves) and sum(moves) <= kappa, (
            f"PRIVACY BUG: __n moved by {moves}{info}")
        zero = (0.0,) * len(es)
        for j, bound in enumerate(es):
            moved = math.fsum(abs(big[g][1][j] - small.get(g, (0, zero))[1][j]) for g in big)
            assert moved <= bound * (1 + 1e-9) + 1e-9, (
                f"PRIVACY BUG: measurement {j} moves by {moved} (L1) > {bound}{info}")
