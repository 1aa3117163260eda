"""Splitting shell input into statements and backslash commands (where a statement ends is
sqlglot's tokenizer's call, :func:`dpsql.sql.statement_end`)."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass

from dpsql.sql import statement_end


@dataclass(frozen=True)
class Statement:
    """One SQL statement (without its ``;``) or one backslash command line, with the 1-based
    line and column of its first character in the input (to place parse errors)."""

    text: str
    line: int
    column: int
    command: bool = False


def _positions(text: str) -> Callable[[int], tuple[int, int]]:
    """``position(index)``: the 1-based line and column of ``text[index]``."""
    starts = [0, *(m.end() for m in re.finditer("\n", text))]

    def position(index: int) -> tuple[int, int]:
        line = bisect.bisect_right(starts, index)
        return line, index - starts[line - 1] + 1

    return position


def _skip_blank(text: str, i: int) -> tuple[int, bool]:
    """The index of the first character at or after ``i`` that is neither whitespace nor inside
    a comment (``--`` to the end of the line, ``/* */``, which nest in DuckDB as in PostgreSQL),
    and whether the text ended inside an unterminated ``/*`` comment."""
    n = len(text)
    while i < n:
        if text[i].isspace():
            i += 1
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while depth:
                close = text.find("*/", i)
                if close < 0:
                    return n, True
                opened = text.find("/*", i, close)
                if opened >= 0:
                    depth, i = depth + 1, opened + 2
                else:
                    depth, i = depth - 1, close + 2
        else:
            break
    return i, False


def split_script(text: str) -> tuple[list[Statement], Statement | None]:
    """The complete statements and backslash commands of ``text``, and the pending statement.

    A statement ends at a ``;`` outside strings, quoted identifiers and comments, as DuckDB's
    SQL is tokenized by sqlglot. A line whose first character outside comments is ``\\``
    (when no statement is pending) is a command. Statements holding only comments are
    dropped. The pending statement is SQL still waiting for its ``;``, or inside an
    unterminated string or comment (None if there is none).
    """
    items: list[Statement] = []
    i, n = 0, len(text)
    position = _positions(text)
    while True:
        first = i
        while first < n and text[first].isspace():
            first += 1
        code, in_comment = _skip_blank(text, i)
        if in_comment:
            return items, Statement(text[first:].strip(), *position(first))
        if code >= n:
            return items, None
        if text[code] == "\\":
            newline = text.find("\n", code)
            i = n if newline < 0 else newline
            items.append(Statement(text[code:i].strip(), *position(code), command=True))
            continue
        end = statement_end(text, code)
        if end is None:
            return items, Statement(text[first:].strip(), *position(first))
        if end > code:  # something besides comments before the ';'
            items.append(Statement(text[first:end].strip(), *position(first)))
        i = end + 1


def statement_complete(text: str) -> bool:
    """Whether Enter should run the buffer: nothing pending, a backslash command, or SQL
    ending with ``;`` (a trailing comment is fine)."""
    if text.lstrip().startswith("\\"):
        return True
    return split_script(text)[1] is None


def script_items(text: str) -> list[Statement]:
    """Every statement of a script; a final statement without ``;`` is included."""
    items, pending = split_script(text)
    return [*items, pending] if pending is not None else items
