"""Tab completion for the shell (prompt_toolkit): keywords, tables after FROM/JOIN, columns
(qualified by table or alias), backslash commands, and table names after \\describe."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from dpsql.cli.commands import COMMANDS

if TYPE_CHECKING:
    from dpsql.metadata import Metadata

KEYWORDS = (
    "SELECT", "FROM", "WHERE", "GROUP BY", "ORDER BY", "HAVING", "LIMIT", "JOIN", "INNER JOIN",
    "ON", "AS", "AND", "OR", "NOT", "IN", "EXISTS", "BETWEEN", "LIKE", "IS NULL", "IS NOT NULL",
    "DISTINCT", "WITH", "UNION ALL", "CASE", "WHEN", "THEN", "ELSE", "END", "ASC", "DESC",
    "COUNT", "SUM", "AVG", "CAST", "DATE", "NULL", "TRUE", "FALSE",
)  # fmt: skip
_TABLE_CONTEXT = re.compile(r"\b(FROM|JOIN)\s+(?:[\w.]+\s*,\s*)*$", re.I)
_ALIAS = re.compile(r"\b(?:FROM|JOIN)\s+(\w+)(?:\s+(?:AS\s+)?(\w+))?", re.I)


def sql_completer(metadata: Metadata) -> Any:
    """A prompt_toolkit completer for SQL over ``metadata`` and for backslash commands."""
    from prompt_toolkit.completion import Completer, Completion

    tables = {t.name: list(t.columns) for t in metadata.tables.values()}
    all_columns = sorted({c for cols in tables.values() for c in cols})

    def matches(prefix: str, candidates: Iterable[str], meta: str) -> Iterator[Completion]:
        low = prefix.lower()
        for cand in candidates:
            if cand.lower().startswith(low) and cand.lower() != low:
                shown = cand.lower() if meta == "keyword" and prefix.islower() else cand
                yield Completion(shown, start_position=-len(prefix), display_meta=meta)

    class SqlCompleter(Completer):
        """Keywords, tables after FROM/JOIN, columns (qualified by table or alias),
        backslash commands, and table names after \\describe."""

        def get_completions(self, document: Any, complete_event: Any) -> Iterator[Completion]:
            before = document.text_before_cursor
            found = re.search(r"[\\\w.]*$", before)
            word = found.group() if found else ""
            if before.lstrip().startswith("\\"):
                head = before.lstrip()
                if " " not in head:
                    yield from matches(word, COMMANDS.names(), "command")
                    return
                name = head.split(" ", 1)[0]
                if name in ("\\describe", "\\d"):
                    yield from matches(word, tables, "table")
                    return
                if name == "\\format":
                    yield from matches(word, ("table", "csv", "json"), "format")
                    return
                if name == "\\help":
                    yield from matches(word, [c.lstrip("\\") for c in COMMANDS.names()],
                                       "command")
                    return
            if "." in word:
                qualifier, prefix = word.rsplit(".", 1)
                # the FROM clause usually comes after the cursor: read aliases from all the text
                aliases = {a.lower(): t.lower() for t, a in _ALIAS.findall(document.text) if a}
                table = aliases.get(qualifier.lower(), qualifier.lower())
                yield from matches(prefix, tables.get(table, ()), "column")
                return
            if _TABLE_CONTEXT.search(before[: len(before) - len(word)]):
                yield from matches(word, tables, "table")
                return
            if not word:
                return
            yield from matches(word, all_columns, "column")
            yield from matches(word, tables, "table")
            yield from matches(word, KEYWORDS, "keyword")

    return SqlCompleter()
