"""Syntax errors in dpsql's own words, with the position of the offending token.

sqlglot reports a parse failure as, for example, "Required keyword: 'this' missing for <class
'sqlglot.expressions.query.Where'>". :func:`syntax_error` turns such reports into sentences an
analyst can act on ("WHERE needs a condition after it") and keeps sqlglot's line and column, so
the shell can point at the token with a caret. The wording depends on the SQL text only.
"""

from __future__ import annotations

import difflib
import re

from sqlglot.errors import ParseError, TokenError

from dpsql.errors import ProgrammingError

#: keywords a misspelling is matched against ("SELEC" -> "SELECT")
_KEYWORDS = ("SELECT", "FROM", "WHERE", "GROUP", "BY", "HAVING", "ORDER", "LIMIT", "JOIN",
             "INNER", "LEFT", "ON", "AS", "AND", "OR", "NOT", "IN", "EXISTS", "BETWEEN",
             "LIKE", "DISTINCT", "WITH", "UNION", "CASE", "WHEN", "THEN", "ELSE", "END",
             "COUNT", "SUM", "AVG", "CAST", "NULL", "OFFSET", "FILTER")
_REQUIRED = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]*\.(\w+)'>")
_EXPECTING = re.compile(r"Expecting (.+)")
_UNTERMINATED = re.compile(r"Missing (['\"]) from (\d+):(\d+)")

#: what a clause or operator missing its operand needs, by sqlglot's class name
_NEEDS = {
    "Where": "WHERE needs a condition after it",
    "Having": "HAVING needs a condition after it",
    "Group": "GROUP BY needs at least one expression",
    "Order": "ORDER BY needs at least one expression",
    "Limit": "LIMIT needs a number",
    "Join": "JOIN needs a table",
    "Cast": "CAST needs a value and a type: CAST(x AS INTEGER)",
    "Case": "CASE needs at least one WHEN ... THEN ...",
    "In": "IN needs a list or a subquery: x IN (1, 2)",
    "Between": "BETWEEN needs two bounds: x BETWEEN 1 AND 10",
    "Alias": "AS needs a name after it",
}
_OPERATORS = {"EQ": "=", "NEQ": "<>", "GT": ">", "GTE": ">=", "LT": "<", "LTE": "<=",
              "Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "And": "AND", "Or": "OR",
              "Like": "LIKE", "Mod": "%"}


def _near(token: str) -> str:
    return f"'{token}'" if token else "the end of the query"


def _misspelling(before: str, token: str) -> str:
    """A hint when the word before the offending token, the token itself or the statement's
    first word looks like a misspelt keyword (in that order), or when GROUP / ORDER lacks BY."""
    words = re.findall(r"[A-Za-z_]+", before)
    if words and words[-1].upper() in ("GROUP", "ORDER"):
        return f"; {words[-1].upper()} needs BY: {words[-1].upper()} BY ..."
    for word in (words[-1] if words else "", token, words[0] if words else ""):
        if not word or word.upper() in _KEYWORDS:
            continue
        guess = difflib.get_close_matches(word.upper(), _KEYWORDS, n=1, cutoff=0.8)
        if guess:
            return f"; did you mean {guess[0]} instead of {word}?"
    return ""


def _sentence(info: dict) -> str:
    description = str(info.get("description") or "")
    token = str(info.get("highlight") or "").strip()
    before = str(info.get("start_context") or "")
    found = _REQUIRED.match(description)
    if found:
        node = found.group(2)
        if node in _NEEDS:
            return _NEEDS[node]
        if node in _OPERATORS:
            return f"'{_OPERATORS[node]}' needs a value on each side"
        return f"{node.upper()} is incomplete near {_near(token)}"
    found = _EXPECTING.match(description)
    if found:
        return f"expected {found.group(1)} before {_near(token)}"
    if description.startswith("Invalid expression / Unexpected token"):
        return f"unexpected {_near(token)}{_misspelling(before, token)}"
    return description[:1].lower() + description[1:] if description else "could not parse"


def syntax_error(err: ParseError | TokenError, sql: str) -> ProgrammingError:
    """The ProgrammingError for a parse failure of ``sql``: a sentence and, when sqlglot knows
    it, the (line, column) where the offending token starts (1-based)."""
    if isinstance(err, ParseError) and err.errors:
        info = err.errors[0]
        position = None
        if info.get("line") is not None:
            # sqlglot's column is the token's last character; point at its first
            token = str(info.get("highlight") or "")
            position = (int(info["line"]), max(1, int(info.get("col") or 0) - len(token) + 1))
        return ProgrammingError(f"SQL syntax error: {_sentence(info)}", position=position)
    # sqlglot's tokenizer raises "Error tokenizing ..." from the "Missing ' from L:C" it met
    found = _UNTERMINATED.search(f"{err} {err.__cause__} {err.__context__}")
    if found:
        # sqlglot gives the line and the quote's 0-based offset in the whole text
        offset = min(int(found.group(3)), len(sql))
        line = sql.count("\n", 0, offset) + 1
        column = offset - (sql.rfind("\n", 0, offset) + 1) + 1
        quote = found.group(1)
        what = "string" if quote == "'" else "quoted name"
        return ProgrammingError(
            f"SQL syntax error: the {what} starting here is never closed: add the closing {quote}",
            position=(line, column))
    return ProgrammingError(f"SQL syntax error: {err}")
