"""dpsql.sql's quoting of dpsql's own statements: every name and text reads back as itself."""

from __future__ import annotations

import duckdb
import pytest

from dpsql.sql import quote_ident, quote_literal

AWKWARD = ['Odd "T" x', "it's", 'a""b', "", "naïve ünïcode", "semi;colon --comment", "x'); DROP"]


def test_quote_ident_doubles_quotes():
    assert quote_ident('Odd "T" x') == '"Odd ""T"" x"'


def test_quote_literal_doubles_quotes():
    assert quote_literal("it's") == "'it''s'"


@pytest.mark.parametrize("text", AWKWARD)
def test_quoted_text_reads_back_as_itself_in_duckdb(text):
    con = duckdb.connect()
    assert con.execute(f"SELECT {quote_literal(text)}").fetchone() == (text,)
    if text:  # an identifier may not be empty
        con.execute(f"CREATE TABLE {quote_ident(text)} ({quote_ident(text + '_c')} INTEGER)")
        assert con.execute("SELECT table_name, column_name FROM information_schema.columns"
                           ).fetchall() == [(text, text + "_c")]
