"""The shell's statement splitter: a ';' ends a statement only outside strings, quoted
identifiers and comments, as sqlglot's DuckDB tokenizer reads them."""

from __future__ import annotations

import pytest

from dpsql.cli.script import Statement, script_items, split_script, statement_complete


def texts(script: str) -> list[str]:
    items, pending = split_script(script)
    assert pending is None, pending
    return [s.text for s in items]


@pytest.mark.parametrize(("script", "expected"), [
    ("SELECT $$a;b$$;", ["SELECT $$a;b$$"]),
    ("SELECT $t$;$t$;", ["SELECT $t$;$t$"]),
    ("SELECT $tag$a;b$tag$;", ["SELECT $tag$a;b$tag$"]),
    ("SELECT $tag$ $other$; $tag$;", ["SELECT $tag$ $other$; $tag$"]),
    ("SELECT $$line 1;\nline 2;$$;", ["SELECT $$line 1;\nline 2;$$"]),
    ("SELECT 'it''s;';", ["SELECT 'it''s;'"]),
    ("SELECT E'a\\';b';", ["SELECT E'a\\';b'"]),
    ('SELECT "a;b" FROM t;', ['SELECT "a;b" FROM t']),
    ('SELECT "a"";b";', ['SELECT "a"";b"']),
    ("SELECT /* ; */ 1;", ["SELECT /* ; */ 1"]),
    ("SELECT /* a /* nested; */ still a comment; */ 1;",
     ["SELECT /* a /* nested; */ still a comment; */ 1"]),
    ("SELECT 1 -- ;\n;", ["SELECT 1 -- ;"]),
    ("SELECT 1; SELECT 2;\nSELECT\n  3\n;", ["SELECT 1", "SELECT 2", "SELECT\n  3"]),
    ("SELECT 'a\nb;c';", ["SELECT 'a\nb;c'"]),
])
def test_semicolons_inside_strings_identifiers_and_comments_do_not_split(
        script: str, expected: list[str]) -> None:
    assert texts(script) == expected


@pytest.mark.parametrize(("script", "closing"), [
    ("SELECT 1", ";"),
    ("SELECT $$a;b", "$$;"),
    ("SELECT $t$;$t", "$;"),
    ("SELECT $t$ ; $other$;", "$t$;"),
    ("SELECT 'it''s;", "';"),
    ("SELECT E'a\\';", "';"),
    ('SELECT "a;b', '";'),
    ("SELECT 1 /* ; ", "*/;"),
    ("SELECT 1 /* /* */ ; ", "*/;"),
    ("SELECT 1 -- ;", "\n;"),
    ("/* only an open comment;", "*/ SELECT 1;"),
])
def test_incomplete_statements_are_pending(script: str, closing: str) -> None:
    items, pending = split_script(script)
    assert items == []
    assert pending == Statement(script.strip(), 1, 1)
    assert not statement_complete(script)
    assert not statement_complete(script + "\n")  # Enter goes on to the next line
    done = script + closing
    assert statement_complete(done)
    assert split_script(done) == ([Statement(done[: done.rindex(";")].strip(), 1, 1)], None)


def test_complete_statements_then_a_pending_one_with_positions() -> None:
    script = "SELECT 1;\n  SELECT 'x;\ny';  SELECT\n 2"
    items, pending = split_script(script)
    assert items == [Statement("SELECT 1", 1, 1), Statement("SELECT 'x;\ny'", 2, 3)]
    assert pending == Statement("SELECT\n 2", 3, 6)
    assert script_items(script) == [*items, pending]


def test_trailing_comment_after_the_semicolon_is_complete() -> None:
    assert statement_complete("SELECT 1; -- done")
    assert statement_complete("SELECT 1; /* done; */")
    assert split_script("SELECT 1; -- done; really\n") == ([Statement("SELECT 1", 1, 1)], None)


def test_comment_only_statements_are_dropped() -> None:
    assert split_script("-- nothing;\n/* here; */ ;\n;;") == ([], None)
    assert statement_complete("")
    assert statement_complete("   \n")


def test_backslash_commands_between_statements() -> None:
    script = ("\\format csv\n"
              "SELECT 1; \\epsilon 0.5\n"
              "-- a comment, then a command\n"
              "\\describe orders;\n"
              "SELECT '\\q;';\n"
              "\\explain SELECT 'unbalanced\n"
              "SELECT 2;\n")
    items, pending = split_script(script)
    assert pending is None
    assert items == [
        Statement("\\format csv", 1, 1, command=True),
        Statement("SELECT 1", 2, 1),
        Statement("\\epsilon 0.5", 2, 11, command=True),
        Statement("\\describe orders;", 4, 1, command=True),
        Statement("SELECT '\\q;'", 5, 1),
        Statement("\\explain SELECT 'unbalanced", 6, 1, command=True),
        Statement("SELECT 2", 7, 1),
    ]
    assert statement_complete("\\tables")


def test_a_backslash_inside_a_pending_statement_is_sql() -> None:
    items, pending = split_script("SELECT\n\\q")
    assert items == [] and pending == Statement("SELECT\n\\q", 1, 1)


def test_leading_comments_stay_with_their_statement() -> None:
    # parse error positions are counted from the statement's first line, comment included
    assert split_script("-- count\nSELECT 1;") == ([Statement("-- count\nSELECT 1", 1, 1)], None)


def test_many_statements_are_split_in_linear_time() -> None:
    script = "".join(f"SELECT {i}, 'x;y' -- c;\n;\n" for i in range(5_000))
    items, pending = split_script(script)
    assert pending is None and len(items) == 5_000
    assert items[-1] == Statement("SELECT 4999, 'x;y' -- c;", 9_999, 1)


def test_a_multi_line_string_then_a_command_with_an_open_quote() -> None:
    items, pending = split_script("SELECT 'a\nb;'; \\explain SELECT 'x\nSELECT 2;")
    assert pending is None
    assert items == [Statement("SELECT 'a\nb;'", 1, 1),
                     Statement("\\explain SELECT 'x", 2, 6, command=True),
                     Statement("SELECT 2", 3, 1)]


def test_a_long_open_string_is_not_rescanned_once_per_line() -> None:
    # pasted into the prompt, this is re-split at every Enter: it must stay cheap
    script = "SELECT $$" + "text; more text\n" * 20_000
    assert split_script(script) == ([], Statement(script.strip(), 1, 1))
    closed = script + "$$; SELECT 1;"
    assert [s.text for s in split_script(closed)[0]] == [closed[:closed.index(";", -12)].strip(),
                                                        "SELECT 1"]
