"""`dpsql metadata check -m M -d D` with several privacy units (dpsql.metadata.unit_multi):
every unit's paths are checked on the database, each on that unit's view."""

from __future__ import annotations

import random

import duckdb

from dpsql.cli.main import main
from tests.metadata.helpers import write
from tests.units import tiny_multi


def test_check_verifies_every_units_paths(tmp_path, capsys):
    db = tmp_path / "two.duckdb"
    data = tiny_multi.random_database(random.Random(2))
    data["items"].append((99, 8, 1))  # an orphan of both units
    con = duckdb.connect(str(db))
    tiny_multi.load(data, con)
    con.close()
    md = write(tmp_path, tiny_multi.YAML.format(gs=8, grid=""))
    assert main(["metadata", "check", "-m", str(md), "-d", str(db)]) == 0
    out, err = capsys.readouterr()
    assert "privacy unit: supplier.s_id (the same bounds)" in out
    assert ("items: private, unit customer: via i_order -> orders.o_id; unit supplier: i_supp"
            in out)
    assert "unit customer.c_id:" in out and "unit supplier.s_id:" in out
    assert "path items.i_order -> orders.o_id" in out
    assert "path items.i_supp -> supplier.s_id" in out
    assert "path stock.k_supp -> supplier.s_id" in out
    assert "warning: items:" in err  # the orphans, per unit
