"""dpsql.metadata.unit_multi: several privacy units (the list form of privacy_unit)."""

from __future__ import annotations

import pytest

from dpsql.errors import ProgrammingError
from dpsql.metadata import UnitPath, dump_metadata, loads_metadata
from dpsql.metadata.analyst import analyst_schema
from dpsql.metadata.unit_multi import all_units, reached_units, unit_view
from tests.units import tiny_multi

HEAD = """
privacy_unit:
  - {table: customer, column: c_id, max_contribution: 16}
  - {table: supplier, column: s_id}
tables:
  customer: {columns: {c_id: {type: INTEGER}}}
  supplier: {columns: {s_id: {type: INTEGER}}}
  nations: {public: true, columns: {n: {type: INTEGER}}}
"""


def _load(tables: str, head: str = HEAD):
    return loads_metadata(head + tables, "<test>")


def test_the_list_form_reads_every_path_and_round_trips():
    md = tiny_multi.metadata()
    assert [u.table for u in all_units(md)] == ["customer", "supplier"]
    assert md.extra_units[0].max_contribution == md.privacy_unit.max_contribution == 8
    items = md.tables["items"]
    assert items.unit_paths == {"customer": UnitPath("i_order", "orders", "o_id"),
                                "supplier": UnitPath("i_supp")}
    assert items.unit == UnitPath("i_order", "orders", "o_id")  # the first unit's
    assert md.tables["stock"].unit is None
    assert md.tables["supplier"].unit_paths == {"supplier": UnitPath("s_id")}
    assert loads_metadata(dump_metadata(md)) == md
    schema = analyst_schema(md)
    assert [u["table"] for u in schema["privacy_unit"]] == ["customer", "supplier"]
    assert schema["tables"]["items"]["unit"]["supplier"] == "i_supp"


def test_a_one_entry_list_is_the_one_unit_form():
    md = _load("  orders: {unit: o_cust, columns: {o_cust: {type: INTEGER}}}\n",
               head=HEAD.replace("  - {table: supplier, column: s_id}\n", "").replace(
                   "  supplier: {columns: {s_id: {type: INTEGER}}}\n", ""))
    assert md.extra_units == () and md.tables["orders"].unit == UnitPath("o_cust")


def test_unit_view_makes_the_tables_of_other_units_public():
    md = tiny_multi.metadata()
    view = unit_view(md, "supplier")
    assert view.privacy_unit is not None and view.privacy_unit.table == "supplier"
    assert view.extra_units == ()
    assert view.tables["orders"].public and view.tables["customer"].public
    assert view.tables["items"].unit == UnitPath("i_supp")
    assert not view.tables["stock"].public
    assert [u.table for u in reached_units(md, ["orders"])] == ["customer"]
    assert [u.table for u in reached_units(md, ["items", "nations"])] == ["customer",
                                                                           "supplier"]
    assert reached_units(md, ["nations"]) == ()


@pytest.mark.parametrize(("tables", "message"), [
    ("  orders: {columns: {o_cust: {type: INTEGER}}}\n",
     "table 'orders': has no path to any privacy unit"),
    ("  orders: {unit: o_cust, columns: {o_cust: {type: INTEGER}}}\n",
     "with several privacy units, 'unit' maps each unit table"),
    ("  orders: {unit: {shop: o_cust}, columns: {o_cust: {type: INTEGER}}}\n",
     "not a privacy unit table"),
    ("  orders: {unit: {customer: o_x}, columns: {o_cust: {type: INTEGER}}}\n",
     "unit names column 'o_x'"),
    ("  orders: {unit: {customer: o_cust}, columns: {o_id: {type: INTEGER},"
     " o_cust: {type: INTEGER}}}\n"
     "  items: {unit: {supplier: {via: i_order, to: orders.o_id}},"
     " columns: {i_order: {type: INTEGER}}}\n",
     "declares no path to the unit 'supplier'"),
])
def test_path_errors_name_the_table_and_the_fix(tables, message):
    with pytest.raises(ProgrammingError, match=message):
        _load(tables)


def test_bounds_belong_on_the_first_entry_and_units_are_distinct():
    with pytest.raises(ProgrammingError, match="declare them on the first entry"):
        _load("", head=HEAD.replace("{table: supplier, column: s_id}",
                                    "{table: supplier, column: s_id, max_groups: 2}"))
    with pytest.raises(ProgrammingError, match="names table 'customer' twice"):
        _load("", head=HEAD.replace("{table: supplier, column: s_id}",
                                    "{table: customer, column: c_id}"))
    with pytest.raises(ProgrammingError, match="empty list"):
        loads_metadata("privacy_unit: []\ntables:\n  t: {columns: {a: {type: INTEGER}}}\n")
