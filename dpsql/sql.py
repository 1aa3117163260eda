"""SQL text helpers shared outside the analysis: a string literal, an identifier, and where a
statement ends, by sqlglot's DuckDB tokenizer (the shell splits scripts with it). sqlglot is
imported on first use, so that `dpsql --help` stays fast."""

from __future__ import annotations

import functools
from typing import Any


def quote_literal(text: str) -> str:
    """``text`` as an SQL string literal (quotes doubled), for dpsql's own statements: file
    paths, an analyst's name in the catalog shadow."""
    return "'" + text.replace("'", "''") + "'"


def quote_ident(name: str) -> str:
    """``name`` as an SQL identifier: double-quoted, embedded quotes doubled (DuckDB and
    PostgreSQL), for dpsql's own statements over the owner's tables and columns."""
    return '"' + name.replace('"', '""') + '"'


@functools.cache
def _tokenizer() -> Any:
    """sqlglot's DuckDB tokenizer, imported on first use so that `dpsql --help` stays fast."""
    from sqlglot.dialects.duckdb import DuckDB

    return DuckDB().tokenizer()


def statement_end(text: str, start: int) -> int | None:
    """The index of the ``;`` ending the statement that starts at ``start``, found by sqlglot's
    DuckDB tokenizer (so ``;`` inside '...', E'...', "...", $$...$$, $tag$...$tag$ and comments
    does not count), or None while the statement is incomplete.

    The text is tokenized a line at a time, as lines usually end between tokens: so a backslash
    command line after the statement is not read as SQL, and a script is tokenized about once.
    A line that ends inside a string or comment makes the tokenizer raise; the tokens it read
    before the open one still count, and the text looked at grows (doubling, so a long string
    is not tokenized once per line) until the string closes or the text ends: a string or
    comment that never closes leaves the statement pending.
    """
    from sqlglot.errors import TokenError
    from sqlglot.tokens import TokenType

    tokenizer = _tokenizer()
    n = len(text)
    chunk = end = start  # text[start:chunk] holds no ';'; text[chunk:end] is tokenized next
    lines = 1
    while end < n:
        for _ in range(lines):
            newline = text.find("\n", end)
            end = n if newline < 0 else newline + 1
            if end == n:
                break
        try:
            tokens = tokenizer.tokenize(text[chunk:end])
        except TokenError:
            tokens, lines = tokenizer.tokens, lines * 2  # the complete tokens before the error
        else:
            lines = 0
        for token in tokens:
            if token.token_type == TokenType.SEMICOLON:
                return chunk + token.start
        if not lines:
            chunk, lines = end, 1
    return None
