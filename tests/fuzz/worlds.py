"""The fuzzers' databases: one schema, base rows, and extreme rows that each make a neighbour
(not a test module).

Every neighbour adds ONE row of the private table ``t`` whose values sit where DuckDB's casts,
arithmetic and comparisons break: NULLs, empty and non-numeric strings, boundary integers, a
DECIMAL(38,20) value that overflows a native sum, NaN and infinity, far dates, case variants
under a NOCASE collation. The base rows are tame (every cast a query could attempt succeeds on
them), so an error on one side only is a leak.
"""

from __future__ import annotations

import atexit
import dataclasses
import shutil
import tempfile
from pathlib import Path

from dpsql.metadata import Metadata, PrivacyUnit, UnitPath, dump_metadata, loads_metadata
from tests.neighbours import write_database

SCHEMA = [
    "CREATE TABLE t (id INTEGER, n INTEGER, s VARCHAR, f VARCHAR, d DATE, x DOUBLE, "
    "dec DECIMAL(38,20), g VARCHAR, ck VARCHAR COLLATE nocase, b BOOLEAN, pid INTEGER, "
    "h VARCHAR, secret VARCHAR)",  # secret: stored, never declared
    "CREATE TABLE u (id INTEGER, s VARCHAR, ck VARCHAR COLLATE nocase, n INTEGER, "
    "f VARCHAR, b BOOLEAN)",
]

BASE = {
    "t": [(i, i % 5, str(i % 3), "true" if i % 2 else "false", f"2024-01-{1 + i % 28:02d}",
           i / 4, 9 * 10**16, "a" if i % 2 else "b", f"k{i}", i % 2 == 0, 1 + i % 3,
           str(1 + i % 2), "plain")
          for i in range(1, 12)],
    # 'K1' and 'k1' are distinct (max_freq 1 holds) but equal under NOCASE; id 1 is the
    # U_ROW neighbour's
    "u": [(i, str(i % 3), f"k{i}", i, "true", True) for i in range(2, 8)]
    + [(8, "1", "K1", 8, "true", True), (9, "2", "k1", 9, "true", True)],
}

#: one extreme row of t per neighbour
EXTREMES: dict[str, tuple] = {
    "nulls": (100, None, None, None, None, None, None, None, None, None, None, None, None),
    # pid outside p's values: a label no declared domain has
    "text": (101, 2147483647, "x", "x", "9999-12-31", float("nan"), 9 * 10**16, "a", "K1",
             True, 7, "x", "plain"),
    "empty": (102, -2147483648, "", "", "0001-01-01", float("inf"), 0, "b", "k99", False,
              2147483647, "", "plain"),
    "case": (103, 0, "A", "TRUE", "2024-02-29", -0.0, 1, "A", "K3", None, 1, "01", "plain"),
}

#: the database whose only difference is an undeclared column's value
UNDECLARED = "undeclared"

#: a neighbour adding one row of the other private table, u
U_ROW = (1, "1", "k0", 1, "true", True)

#: hole class 6 uses metadata neighbours: the same data, declared max frequencies apart
MAX_FREQS = (2, 10**9)


#: the unit the fuzzers' unit world declares (every row of t is one unit; u reaches it by id)
UNIT = """privacy_unit: {{table: t, column: id, max_contribution: 4, max_groups: {kappa},
               max_rows_per_group: 2}}
"""


def metadata(csv: Path, mf: int = 2, *, unit: bool = False, max_groups: int = 2) -> Metadata:
    """The worlds' metadata; with ``unit`` under a privacy unit (t's id; u's rows reach it by
    their id), where each extreme neighbour adds one unit (a new id) and ``u_row`` changes one
    unit (two steps of the add/remove relation). ``max_groups`` 1: one unit touches one group,
    where a selection without a released COUNT(*) draws the optimal mechanism (issue #16)."""
    return loads_metadata(f"""
{UNIT.format(kappa=max_groups) if unit else ""}tables:
  t:
    sample_aggregate: {{blocks: 3}}
    columns:
      id: {{max_freq: 1, type: INTEGER}}
      n: {{max_freq: 12, type: INTEGER, bounds: [0, 100]}}
      s: {{max_freq: {mf + 10}, type: VARCHAR, releasable: true, partition_selection: true}}
      f: {{type: VARCHAR}}
      d: {{type: DATE, bounds: ['2024-01-01', '2024-03-31']}}
      x: {{type: DOUBLE, bounds: [-10, 10]}}
      dec: {{type: "DECIMAL(38,20)", bounds: [0, 100000000000000000]}}
      g: {{type: VARCHAR, releasable: true, domain: {{values: [a, b]}}}}
      ck: {{max_freq: 1, releasable: true, partition_selection: true}}
      b: {{type: BOOLEAN}}
      pid: {{type: INTEGER, releasable: true, domain: {{table: p, column: pid}}}}
      h: {{type: VARCHAR, releasable: true, domain: {{values: [1, 2]}}}}
  u:
    {"unit: id" if unit else ""}
    columns:
      id: {{max_freq: 1, type: INTEGER}}
      s: {{max_freq: {mf + 5}, type: VARCHAR}}
      ck: {{max_freq: 1}}
      n: {{type: INTEGER}}
      f: {{type: VARCHAR}}
      b: {{type: BOOLEAN}}
  p:
    public: true
    source: {csv}
    columns:
      pid: {{max_freq: 1, type: BIGINT}}
      name: {{type: VARCHAR}}
""")


def unit_metadata(csv: Path, mf: int = 2) -> Metadata:
    """:func:`metadata` under a privacy unit (issue #17): u is the unit table, its unit id is
    ``u.n``; t reaches it through ``t.id -> u.id`` (so the executed query looks the unit up
    by a LEFT JOIN to u's key, and the grammar's joins and semi-joins on id follow the path;
    t rows 1, 10, 11 and the extreme rows are orphans -- rows of no unit -- until a u row has
    their id, as the u_row neighbour's does for t row 1)."""
    md = metadata(csv, mf)
    tables = dict(md.tables)
    tables["t"] = dataclasses.replace(tables["t"], unit=UnitPath("id", "u", "id"))
    tables["u"] = dataclasses.replace(tables["u"], unit=UnitPath("n"))
    return dataclasses.replace(md, tables=tables, privacy_unit=PrivacyUnit(
        "u", "n", max_contribution=8, max_groups=2, max_rows_per_group=2))


def two_unit_metadata(csv: Path, mf: int = 2) -> Metadata:
    """:func:`unit_metadata` with t a second unit table (several units, dpsql.units.multi):
    a t row is its own unit (its id) AND reaches u's unit along ``t.id -> u.id``, so a query
    reading t reaches both units (released by the max-flow truncation without GROUP BY,
    refused with it) and one reading u alone reaches u only. Written and read back as YAML,
    so the loader validates the two units' paths."""
    md = unit_metadata(csv, mf)
    assert md.privacy_unit is not None
    tables = dict(md.tables)
    tables["t"] = dataclasses.replace(tables["t"], unit_paths={
        "u": UnitPath("id", "u", "id"), "t": UnitPath("id")})
    tables["u"] = dataclasses.replace(tables["u"], unit_paths={"u": UnitPath("n")})
    extra = (dataclasses.replace(md.privacy_unit, table="t", column="id"),)
    two = dataclasses.replace(md, tables=tables, extra_units=extra)
    return loads_metadata(dump_metadata(two), "<the fuzz worlds under two units>")


#: the worlds written once in this process: (their folder, what build returns there)
_TEMPLATE: list[tuple[Path, tuple[Path, dict[str, Path], Path]]] = []


def build(folder: Path) -> tuple[Path, dict[str, Path], Path]:
    """The base database, one neighbour per extreme row, and the public CSV, in ``folder``.

    The files are fixed data: each process writes them once (~0.4 CPU-s; the fuzz fixtures ask
    several times per worker) to a private template folder and copies them (closed DuckDB files,
    one file each) to every ``folder``."""
    if not _TEMPLATE:
        template = Path(tempfile.mkdtemp(prefix="dpsql-worlds-template-"))
        atexit.register(shutil.rmtree, template, ignore_errors=True)
        _TEMPLATE.append((template, _write(template)))
    template, (base, neighbours, csv) = _TEMPLATE[0]
    shutil.copytree(template, folder, dirs_exist_ok=True)

    def moved(path: Path) -> Path:
        return folder / path.relative_to(template)

    return moved(base), {name: moved(p) for name, p in neighbours.items()}, moved(csv)


def _write(folder: Path) -> tuple[Path, dict[str, Path], Path]:
    csv = folder / "p.csv"
    csv.write_text("pid,name\n1,one\n2,two\n3,three\n")
    base = write_database(folder / "base.duckdb", SCHEMA, BASE)
    neighbours = {}
    for name, row in EXTREMES.items():
        rows = {"t": [*BASE["t"], row], "u": BASE["u"]}
        neighbours[name] = write_database(folder / f"{name}.duckdb", SCHEMA, rows)
    # the same rows, one undeclared value changed: nothing released may differ at all
    secret = [(*BASE["t"][0][:-1], "SECRET"), *BASE["t"][1:]]
    neighbours[UNDECLARED] = write_database(folder / "secret.duckdb", SCHEMA,
                                            {"t": secret, "u": BASE["u"]})
    neighbours["u_row"] = write_database(folder / "u_row.duckdb", SCHEMA,
                                         {"t": BASE["t"], "u": [*BASE["u"], U_ROW]})
    return base, neighbours, csv
