"""dpsql/rewrite/domains.py: a declared value list's relation is built once per Domain object
and key type (public metadata alone), and its SQL is what a fresh build generates. The
relations themselves are checked by the fixtures (fixtures/domains.sql) and on DuckDB by
tests/rewrite/test_rewrite_equivalence.py."""

from __future__ import annotations

import gc

import duckdb

from dpsql.analysis.parse import DIALECT
from dpsql.metadata import Domain
from dpsql.rewrite import domains
from dpsql.rewrite.domains import _values_relation, listed_relation, relation_sql


def test_a_listed_domain_relation_is_built_once_per_domain_and_type():
    domain = Domain(values=("b", "a", None))
    first = listed_relation(domain, "VARCHAR")
    assert listed_relation(domain, "VARCHAR") is first
    assert listed_relation(domain, "INTEGER") is not first  # another cast
    # an equal Domain object of another metadata has its own entry (keyed by identity)
    assert listed_relation(Domain(values=("b", "a", None)), "VARCHAR") is not first


def test_its_sql_is_the_fresh_generation_and_keeps_the_listed_order():
    domain = Domain(values=(3, 1, 2))
    relation = listed_relation(domain, "INTEGER")
    fresh = f"SELECT __v, __o FROM {_values_relation((3, 1, 2), 'INTEGER').sql(dialect=DIALECT)}"
    assert relation_sql(relation) == relation.sql(dialect=DIALECT) == fresh
    rows = duckdb.connect().execute(relation_sql(relation)).fetchall()
    assert rows == [(3, 0), (1, 1), (2, 2)]


def test_relation_sql_of_any_other_relation_generates_it():
    other = _values_relation(("x",), None)
    assert relation_sql(other) == other.sql(dialect=DIALECT)


def test_the_memo_forgets_a_domain_that_is_gone():
    domain = Domain(values=("gone",))
    relation_id = id(listed_relation(domain, None))
    key = id(domain)
    assert key in domains._LISTED and relation_id in domains._LISTED_SQL
    del domain
    gc.collect()
    assert key not in domains._LISTED and relation_id not in domains._LISTED_SQL
