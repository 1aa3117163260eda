"""Fixture files for the rewrite passes, in the manner of sqlglot's optimizer tests.

Each ``fixtures/<pass>.sql`` holds cases::

    # title: what the case shows
    # metadata: shop                  (a metadata fixture below: shop or ledger)
    # params: [3, 'new']              (optional: the analyst's ``?`` values, a Python literal)
    # stored: true                    (optional: the backend promises stored facts, see Stored)
    # expect: SELECT ...;             (optional: the answer DIFFERS from the analyst's SQL on
    #                                  the fixture data, and this query computes it independently)
    # rows: [(12,)]                   (optional: the same, as literal rows)
    # original: raises                (optional: the analyst's SQL raises on the fixture data)
    # xfail: <reason>                 (optional: a known bug; the expected text is what the
    #                                  pass SHOULD write, kept by hand: regeneration skips it)
    <the analyst's SQL>;
    <the SQL after PASSES up to and including this pass>;

For ``domains`` the expected statements are the group keys' domain relations, one per key (the
pass records them and leaves the query alone).

Every case is checked twice:

1. text: the analyst's SQL is analysed (:func:`dpsql.analysis.elastic.analyze`), the PASSES run
   up to the named one over the qualified query, and the DuckDB SQL is compared with the
   expected statement (both normalised through ``sqlglot.parse_one(...).sql("duckdb")``);
2. execution: the analyst's qualified SQL and the rewritten SQL both run on a small in-memory
   DuckDB database (built below) with no noise, and must return the same rows, or the rows the
   case says instead (``expect`` / ``rows``, which must then differ from the analyst's answer,
   so the case bites). Before the clamps pass the rewritten query keeps the analyst's select
   list; from the clamps pass on it selects ``__k<i>, __m<j>`` and the answer is read through
   the post-processing query (:func:`dpsql.rewrite.post.build_post`) over that result, as the
   engine does; for ``domains`` through the exact-result layout (domain query, bins query).

``DPSQL_REGEN_FIXTURES=1`` rewrites the expected statements from what the passes produce now
(the test then passes trivially on text: review the diff before committing it).
"""

from __future__ import annotations

import ast
import math
import os
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest
import sqlglot
from sqlglot import exp

from dpsql.analysis.elastic import analyze
from dpsql.analysis.parse import DIALECT
from dpsql.backends.duckdb import domain_table_name
from dpsql.execute import layout
from dpsql.metadata import Metadata, loads_metadata
from dpsql.rewrite.context import RewriteContext
from dpsql.rewrite.domains import scan_relation
from dpsql.rewrite.parameters import bind_params, used_params
from dpsql.rewrite.plan import PASSES
from dpsql.rewrite.post import NOISY_TABLE, build_post

FIXTURES = Path(__file__).parent / "fixtures"
REGEN = os.environ.get("DPSQL_REGEN_FIXTURES") == "1"

#: fixture file -> the pass it checks (PASSES run up to and including it)
PASS_OF_FILE = {
    "parameters": "number_parameters",
    "not_in": "not_in_as_not_exists",
    "totality": "make_total_pass",
    "null_safe_not_in": "null_safe_not_in",
    "ordered": "order_inner_aggregates",
    "clamps": "clamp_measurements",
    "domains": "domain_relations",
}
PASS_NAMES = [p.__name__ for p in PASSES]
KEYS = ("title", "metadata", "params", "stored", "expect", "rows", "original", "xfail")

# --------------------------------------------------------------------------- the database

METADATA_YAML = {
    "shop": """\
tables:
  customers:
    columns:
      customer_id: {max_freq: 1, type: INTEGER}
      region: {max_freq: 3, releasable: true, type: VARCHAR,
               domain: {values: [north, south, east, west]}}
      segment: {max_freq: 6, releasable: true, type: VARCHAR,
                domain: {values: [consumer, business]}}
      age: {bounds: [0, 120], type: INTEGER}
  products:
    public: true
    columns:
      product_id: {max_freq: 1, type: INTEGER}
      category: {max_freq: 2, type: VARCHAR}
      price: {type: DOUBLE}
  orders:
    columns:
      order_id: {max_freq: 1, type: INTEGER}
      customer_id: {max_freq: 5, type: INTEGER}
      product_id: {max_freq: 8, releasable: true, type: INTEGER,
                   domain: {table: products, column: product_id}}
      quantity: {max_freq: 8, releasable: true, bounds: [0, 10], type: INTEGER,
                 domain: {values: [1, 2, 3, 4, 5]}}
      order_cost: {bounds: [0, 500], type: DOUBLE}
      status: {max_freq: 14, releasable: true, type: VARCHAR,
               domain: {values: [new, shipped, returned]}}
  recommendations:
    columns:
      customer_id: {max_freq: 3, type: INTEGER}
      product_id: {max_freq: 4, type: INTEGER}
""",
    # Declared types the clamps and totality passes treat differently. ``fee`` is the one
    # column whose data lie outside its bounds; ``code`` holds one text that is no number;
    # ``note`` and ``raw`` have no declared type.
    "ledger": """\
tables:
  ledger:
    columns:
      id: {max_freq: 1, type: INTEGER}
      account: {max_freq: 4, type: INTEGER}
      amount: {bounds: [0, 100], type: "DECIMAL(10,2)"}
      small: {bounds: [0, 50], type: SMALLINT}
      big: {bounds: [-1000, 1000], type: BIGINT}
      ratio: {bounds: [0, 1], type: DOUBLE}
      wide: {bounds: [0, 100], type: "DECIMAL(38,2)"}
      tenth: {bounds: [0, 0.1], type: "DECIMAL(10,2)"}
      fee: {bounds: [0, 10], type: "DECIMAL(10,2)"}
      code: {max_freq: 1, type: VARCHAR}
      day: {type: DATE}
      flag: {type: BOOLEAN}
      kind: {max_freq: 6, releasable: true, type: VARCHAR, domain: {values: [a, b, c]}}
      note: {max_freq: 12}
      raw: {bounds: [0, 100]}
  accounts:
    public: true
    columns:
      account: {max_freq: 1, type: INTEGER}
      owner: {type: VARCHAR}
""",
}

REGIONS = ("north", "south", "east", "west")
STATUSES = ("new", "shipped", "returned")


def _customers() -> list[tuple]:
    # customer 10's segment 'staff' lies outside the declared domain (domains.sql)
    return [(i, REGIONS[i % 4], "staff" if i == 10 else ("consumer", "business")[i % 2],
             18 + 7 * i) for i in range(1, 11)]


def _products() -> list[tuple]:
    categories = ("books", "garden", "games", "kitchen", "tools", "books")
    return [(p, categories[p - 1], p * 2.5) for p in range(1, 7)]


def _orders() -> list[tuple]:
    rows = []
    for i in range(1, 31):
        cost = None if i % 9 == 0 else (i * 37 % 400) + 0.25 * (i % 4)
        # customers 1..12 (11 and 12 are no customers); products 1..6; quantity 1..5
        rows.append((i, 1 + i * 7 % 12, 1 + i % 6, 1 + i * 3 % 5, cost, STATUSES[i * 5 % 7 % 3]))
    return rows


def _recommendations() -> list[tuple]:
    # customers up to 13; product 6 is never recommended; one NULL product (customer 1)
    return [(1 + i % 13, 1 + i % 5) for i in range(12)] + [(1, None)]


def _ledger() -> list[tuple]:
    rows = []
    for i in range(1, 13):
        rows.append((
            i, 1 + i % 4,
            Decimal(i * 7 % 100) + Decimal("0.25"),  # amount in [0, 100]
            i * 4 % 51,  # small in [0, 50]
            (i * 137 % 2000) - 1000,  # big in [-1000, 1000]
            (i % 5) / 4,  # ratio in [0, 1]
            Decimal(i * 11 % 100) + Decimal("0.50"),  # wide in [0, 100]
            Decimal(i % 10) / 100,  # tenth in [0, 0.1]
            Decimal(i * 3) - Decimal("4.5"),  # fee: -1.5 .. 31.5, partly outside [0, 10]
            "n/a" if i == 7 else str(i * 13),  # code: one text that is no number
            f"2024-{1 + i % 12:02d}-{1 + i * 2:02d}",
            i % 3 == 0,
            "abc"[i % 3],
            f"note {i % 2}",
            str(i * 8),  # raw: text holding numbers in [0, 100]
        ))
    return rows


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    return str(value)


def _insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[tuple]) -> None:
    values = ", ".join("(" + ", ".join(_literal(v) for v in r) + ")" for r in rows)
    con.execute(f"INSERT INTO {table} VALUES {values}")


def build_database() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    con.execute("CREATE TABLE customers (customer_id INTEGER, region VARCHAR, segment VARCHAR, "
                "age INTEGER)")
    con.execute("CREATE TABLE products (product_id INTEGER, category VARCHAR, price DOUBLE)")
    con.execute("CREATE TABLE orders (order_id INTEGER, customer_id INTEGER, "
                "product_id INTEGER, quantity INTEGER, order_cost DOUBLE, status VARCHAR)")
    con.execute("CREATE TABLE recommendations (customer_id INTEGER, product_id INTEGER)")
    con.execute("CREATE TABLE ledger (id INTEGER, account INTEGER, amount DECIMAL(10,2), "
                "small SMALLINT, big BIGINT, ratio DOUBLE, wide DECIMAL(38,2), "
                "tenth DECIMAL(10,2), fee DECIMAL(10,2), code VARCHAR, day DATE, "
                "flag BOOLEAN, kind VARCHAR, note VARCHAR, raw VARCHAR)")
    con.execute("CREATE TABLE accounts (account INTEGER, owner VARCHAR)")
    _insert(con, "customers", _customers())
    _insert(con, "products", _products())
    _insert(con, "orders", _orders())
    _insert(con, "recommendations", _recommendations())
    _insert(con, "ledger", _ledger())
    _insert(con, "accounts", [(a, f"owner {a}") for a in range(1, 5)])
    return con


class Stored:
    """The backend's promises (:class:`dpsql.rewrite.context.StoredData`), read from the
    fixture database as the engine reads them from its backend."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    def in_bounds(self, table: str, column: str, bounds: tuple[float, float]) -> bool:
        lo, hi = self.con.execute(f"SELECT MIN({column}), MAX({column}) FROM {table}").fetchone()
        return lo is None or (bounds[0] <= lo and hi <= bounds[1])

    def domain_table(self, table: str, column: str) -> str:
        """The column's domain table, registered in the fixture database as the DuckDB
        backend registers it."""
        name = domain_table_name(table, column)
        scan = scan_relation(table, column).sql(dialect=DIALECT)
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {scan}")
        return name


# --------------------------------------------------------------------------- the files


@dataclass
class Case:
    file: str
    title: str
    meta: dict[str, str]
    sql: str
    expected: list[str] = field(default_factory=list)

    @property
    def pass_name(self) -> str:
        return PASS_OF_FILE[self.file]

    @property
    def params(self) -> list[Any]:
        return list(ast.literal_eval(self.meta["params"])) if "params" in self.meta else []


def _statements(lines: list[str]) -> list[str]:
    """SQL statements, each ending with a line that ends with ``;``."""
    out, current = [], []
    for line in lines:
        if not line.strip():
            continue
        current.append(line)
        if line.rstrip().endswith(";"):
            out.append("\n".join(current).rstrip()[:-1].rstrip())
            current = []
    assert not current, f"statement without a final ';': {current}"
    return out


def read_cases(path: Path) -> list[Case]:
    cases: list[Case] = []
    block: list[str] = []
    blocks = []
    for line in path.read_text().splitlines():
        if line.startswith("# title:") and block:
            blocks.append(block)
            block = []
        block.append(line)
    if block:
        blocks.append(block)
    for block in blocks:
        meta = {}
        sql_lines = []
        for line in block:
            m = re.match(r"# (\w+):\s*(.*)$", line)
            if m and m.group(1) in KEYS:
                meta[m.group(1)] = m.group(2).strip()
            elif line.startswith("#"):
                continue  # a comment
            else:
                sql_lines.append(line)
        if "title" not in meta:
            assert not "".join(sql_lines).strip(), f"{path.name}: SQL before the first title"
            continue
        statements = _statements(sql_lines)
        assert statements, f"{path.name}: {meta['title']!r} has no SQL"
        cases.append(Case(path.stem, meta["title"], meta, statements[0], statements[1:]))
    return cases


def write_cases(path: Path, cases: list[Case]) -> None:
    parts = []
    header = [line for line in path.read_text().splitlines() if line.startswith("#")]
    # keep the file's leading comment (lines before the first title)
    lead = []
    for line in header:
        if line.startswith("# title:"):
            break
        lead.append(line)
    if lead:
        parts.append("\n".join(lead) + "\n")
    for case in cases:
        lines = [f"# {key}: {case.meta[key]}" for key in KEYS if key in case.meta]
        lines.append(case.sql + ";")
        lines.extend(e + ";" for e in case.expected)
        parts.append("\n".join(lines) + "\n")
    path.write_text("\n".join(parts))


ALL_CASES = [case for name in PASS_OF_FILE for case in read_cases(FIXTURES / f"{name}.sql")]


# --------------------------------------------------------------------------- the rewrite


def normalise(sql: str) -> str:
    return sqlglot.parse_one(sql, read="duckdb").sql("duckdb")


def pretty(sql: str) -> str:
    return sqlglot.parse_one(sql, read="duckdb").sql("duckdb", pretty=True)


@dataclass
class Rewritten:
    original: str  # the analyst's qualified query
    tree: exp.Expression  # after the case's pass
    ctx: RewriteContext

    def generated(self, file: str) -> list[str]:
        if file == "domains":
            return [d.sql(dialect=DIALECT) for d in self.ctx.domains]
        return [self.tree.sql(dialect=DIALECT)]


def rewrite(case: Case, metadata: dict[str, Metadata], con) -> Rewritten:
    md = metadata[case.meta["metadata"]]
    analysis = analyze(case.sql, md)
    original = analysis.query.sql(dialect=DIALECT)
    stored = Stored(con) if case.meta.get("stored") == "true" else None
    ctx = RewriteContext(analysis, md, stored)
    tree: exp.Expression = analysis.query
    for rewrite_pass in PASSES[:PASS_NAMES.index(case.pass_name) + 1]:
        tree = rewrite_pass(tree, ctx=ctx)
    return Rewritten(original, tree, ctx)


# --------------------------------------------------------------------------- execution


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float | Decimal) and not isinstance(v, bool)


def _sort_key(row: tuple) -> tuple:
    return tuple((0, round(float(v), 6), "") if _is_number(v) else (1, 0.0, repr(v))
                 for v in row)


def assert_same_rows(got: list[tuple], want: list[tuple], *, ordered: bool) -> None:
    assert len(got) == len(want), (got, want)
    if not ordered:
        got, want = sorted(got, key=_sort_key), sorted(want, key=_sort_key)
    for g, w in zip(got, want, strict=True):
        assert len(g) == len(w), (g, w)
        for a, b in zip(g, w, strict=True):
            if _is_number(a) and _is_number(b):
                assert math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9), (got, want)
            else:
                assert a == b, (got, want)


def _same_rows(got: list[tuple], want: list[tuple], *, ordered: bool) -> bool:
    try:
        assert_same_rows(got, want, ordered=ordered)
    except AssertionError:
        return False
    return True


def _named(sql: str, params: list[Any]) -> dict[str, Any]:
    return bind_params(used_params(sql), params)


def run_rewritten(case: Case, rw: Rewritten, con) -> tuple[list[tuple], bool]:
    """The rewritten query's answer in the analyst's shape, and whether it is ordered."""
    params, ctx = case.params, rw.ctx
    numbered = ctx.numbered if ctx.numbered is not None else rw.tree
    ordered = numbered.args.get("order") is not None
    position = PASS_NAMES.index(case.pass_name)
    sql = rw.tree.sql(dialect=DIALECT)
    if position < PASS_NAMES.index("exact_shape"):  # the analyst's query, parameters named
        return con.execute(sql, _named(sql, params)).fetchall(), ordered
    if position < PASS_NAMES.index("clamp_measurements"):  # the analyst's select list
        for arg in ("having", "order", "limit", "offset", "distinct"):
            assert numbered.args.get(arg) is None, "use a later pass's file for this clause"
        return con.execute(sql, _named(sql, params)).fetchall(), False
    analysis = ctx.analysis
    if case.pass_name == "domain_relations":
        exact = layout.write(sql, [d.sql(dialect=DIALECT) for d in ctx.domains],
                             len(analysis.measurements))
        if exact.domain_sql is None:
            domains = layout.NO_DOMAINS
        else:
            cur = con.execute(exact.domain_sql, _named(exact.domain_sql, params))
            domains = layout.read_domains(len(analysis.group_keys), cur.fetchall(),
                                          [str(d[1]) for d in cur.description])
        columns = list(con.execute(exact.bins_sql,
                                   _named(exact.bins_sql, params)).fetchnumpy().values())
        bins = layout.read_bins(domains, [m.integer for m in analysis.measurements], columns)
        table = {f"__k{i}": k for i, k in enumerate(bins.keys)}
        table.update({f"__m{j}": v for j, v in enumerate(bins.exact)})
        con.register(NOISY_TABLE, table)
    else:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {NOISY_TABLE} AS {sql}",
                    _named(sql, params))
    post = build_post(analysis, numbered).sql(dialect=DIALECT)
    try:
        return con.execute(post, _named(post, params)).fetchall(), ordered
    finally:
        if case.pass_name == "domain_relations":
            con.unregister(NOISY_TABLE)
        else:
            con.execute(f"DROP TABLE {NOISY_TABLE}")


# --------------------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def database():
    con = build_database()
    yield con
    con.close()


@pytest.fixture(scope="module")
def metadata() -> dict[str, Metadata]:
    return {name: loads_metadata(text) for name, text in METADATA_YAML.items()}


@pytest.fixture(scope="module")
def regenerated(metadata, database):
    """With DPSQL_REGEN_FIXTURES=1: every file rewritten from the passes' output first."""
    if REGEN:
        for name in PASS_OF_FILE:
            path = FIXTURES / f"{name}.sql"
            cases = read_cases(path)
            for case in cases:
                if "xfail" in case.meta:
                    continue  # hand-written: what the pass should write once fixed
                case.expected = [pretty(s) for s in
                                 rewrite(case, metadata, database).generated(case.file)]
            write_cases(path, cases)
    return {(c.file, c.title): c for name in PASS_OF_FILE
            for c in read_cases(FIXTURES / f"{name}.sql")}


def _case_id(case: Case) -> str:
    return f"{case.file}:{re.sub(r'[^a-z0-9]+', '_', case.title.lower()).strip('_')}"


def _params(cases: list[Case]) -> list:
    return [pytest.param(c, id=_case_id(c), marks=[pytest.mark.xfail(
        strict=True, reason=c.meta["xfail"])] if "xfail" in c.meta else [])
        for c in cases]


@pytest.mark.parametrize("case", _params(ALL_CASES))
def test_rewrite_text(case, metadata, database, regenerated):
    case = regenerated[(case.file, case.title)]
    generated = rewrite(case, metadata, database).generated(case.file)
    assert [normalise(s) for s in generated] == [normalise(s) for s in case.expected], (
        f"{case.file}.sql, {case.title!r}: the pass now writes\n"
        + ";\n".join(pretty(s) for s in generated)
        + ";\n(DPSQL_REGEN_FIXTURES=1 rewrites the file; review the diff)")


@pytest.mark.parametrize("case", _params(ALL_CASES))
def test_rewrite_answers_as_the_analyst_sql(case, metadata, database):
    con = database.cursor()
    try:
        rw = rewrite(case, metadata, con)  # a registered domain is this cursor's
        got, ordered = run_rewritten(case, rw, con)
        if case.meta.get("original") == "raises":
            with pytest.raises(duckdb.Error):
                con.execute(rw.original, case.params).fetchall()
            original = None
        else:
            original = con.execute(rw.original, case.params).fetchall()
        if "expect" in case.meta:
            want = con.execute(case.meta["expect"].rstrip(";")).fetchall()
        elif "rows" in case.meta:
            want = list(ast.literal_eval(case.meta["rows"]))
        else:
            assert original is not None
            want = original
        # not vacuous: some row, some value that is neither 0 nor NULL
        assert want and any(v not in (0, None) for row in want for v in row), want
        assert_same_rows(got, want, ordered=ordered)
        if want is not original and original is not None:
            assert not _same_rows(original, want, ordered=ordered), (
                "the case says the answer differs from the analyst's SQL, but it does not")
    finally:
        con.close()


def test_every_pass_has_cases():
    counts = {name: sum(c.file == name for c in ALL_CASES) for name in PASS_OF_FILE}
    assert all(n >= 3 for n in counts.values()), counts
    assert sum(counts.values()) >= 25, counts


def test_titles_are_unique():
    keys = [(c.file, c.title) for c in ALL_CASES]
    assert len(keys) == len(set(keys))
