"""dpsql metadata for the benchmark's TPC-H database.

Max frequencies and row counts come from :func:`dpsql.metadata.build.build_metadata` on the
generated database (so they are exact for the scale being run); nation, region and part are
public, as in FLEX's TPC-H experiment (plus ``supplier_names``, the public list of supplier
names that the TPC-H specification fixes for a scale factor, used as the domain of ``s_name``).
Clamping bounds and releasable domains are owner decisions, so they are set here from the
TPC-H specification (clause 4.2.3), never from the data.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import duckdb
import yaml

from dpsql.metadata import dump_metadata, load_metadata
from dpsql.metadata.build import build_metadata

from .tpch_gen import PRIORITIES, SEGMENTS, SHIP_INSTRUCT, SHIP_MODES

PUBLIC_TABLES = ("nation", "region", "part", "supplier_names")

#: Clamp bounds for SUM/AVG arguments, from the value ranges of clause 4.2.3.
BOUNDS: dict[str, dict[str, list[float]]] = {
    "lineitem": {
        "l_quantity": [0, 50],
        "l_extendedprice": [0, 105_000],  # 50 * the largest retail price (2,099.00)
        "l_discount": [0, 0.1],
        "l_tax": [0, 0.08],
    },
    "orders": {"o_totalprice": [0, 800_000]},  # 7 lines * 105,000 * 1.08
    "customer": {"c_acctbal": [-999.99, 9999.99]},
    "supplier": {"s_acctbal": [-999.99, 9999.99]},
    "partsupp": {"ps_supplycost": [1, 1000], "ps_availqty": [1, 9999]},
}

#: Day bounds of the date columns: every date lies in [STARTDATE, ENDDATE] = [1992-01-01,
#: 1998-12-31] (clause 4.2.3: o_orderdate up to ENDDATE - 151 days, l_shipdate and
#: l_commitdate before l_receiptdate <= ENDDATE). Group keys computed from them
#: (EXTRACT(year FROM o_orderdate)) take their bins from these days.
DATE_BOUNDS: dict[str, dict[str, list[str]]] = {
    "orders": {"o_orderdate": ["1992-01-01", "1998-12-31"]},
    "lineitem": {col: ["1992-01-01", "1998-12-31"]
                 for col in ("l_shipdate", "l_commitdate", "l_receiptdate")},
}

#: Releasable group keys and their domains: value lists from the specification, or a public
#: table's column.
DOMAINS: dict[str, dict[str, dict[str, Any]]] = {
    "lineitem": {
        "l_returnflag": {"values": ["A", "N", "R"]},
        "l_linestatus": {"values": ["F", "O"]},
        "l_shipmode": {"values": sorted(SHIP_MODES)},
        "l_shipinstruct": {"values": sorted(SHIP_INSTRUCT)},
        "l_linenumber": {"values": list(range(1, 8))},
        # a part's key, public in the part table: Q17's correlated subquery is a histogram
        # over it (dpsql.analysis.correlated), restricted to the parts Q17's WHERE keeps
        "l_partkey": {"table": "part", "column": "p_partkey"},
    },
    "orders": {
        "o_orderpriority": {"values": list(PRIORITIES)},
        "o_orderstatus": {"values": ["F", "O", "P"]},
    },
    "customer": {
        "c_mktsegment": {"values": list(SEGMENTS)},
        "c_nationkey": {"table": "nation", "column": "n_nationkey"},
    },
    "supplier": {
        "s_name": {"table": "supplier_names", "column": "s_name"},
        "s_nationkey": {"table": "nation", "column": "n_nationkey"},
    },
}

HEADER = (
    "TPC-H metadata for dpsql's benchmarks (benchmarks/tpch_metadata.py), profiled at SF {scale}.",
    "Max frequencies and rows come from the generated data (OWNER-ONLY: do not share with",
    "analysts); bounds and domains are set from the TPC-H specification, not from the data.",
    "nation, region and part are public as in FLEX's TPC-H experiment; supplier_names is the",
    "public list of supplier names the specification fixes for a scale factor.",
    "`python -m benchmarks` regenerates it for each scale it runs.",
)


def metadata_yaml(db_path: str | os.PathLike, scale: float) -> str:
    """The metadata text for the TPC-H database at ``db_path`` (validated by loading it)."""
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        con.execute("SET enable_progress_bar=false")
        draft = yaml.safe_load(build_metadata(con, public=PUBLIC_TABLES))
    finally:
        con.close()
    tables = draft["tables"]
    for table, cols in BOUNDS.items():
        for col, bounds in cols.items():
            tables[table]["columns"][col]["bounds"] = bounds
    for table, days in DATE_BOUNDS.items():
        for col, bounds in days.items():
            tables[table]["columns"][col]["bounds"] = bounds
    for table, cols in DOMAINS.items():
        for col, domain in cols.items():
            spec = tables[table]["columns"][col]
            spec["releasable"] = True
            spec["domain"] = domain
    md = load_metadata(draft)  # raises ProgrammingError if anything above is inconsistent
    header = "".join(f"# {line.format(scale=_label(scale))}\n" for line in HEADER)
    return header + dump_metadata(md)


def write_metadata(db_path: str | os.PathLike, scale: float, out: str | os.PathLike) -> Path:
    """Write :func:`metadata_yaml` to ``out``; returns the path."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(metadata_yaml(db_path, scale), encoding="utf-8")
    return out


def _label(scale: float) -> str:
    return f"{scale:g}"
