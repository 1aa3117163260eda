"""The layering docs/design.md states (section 1), checked on the source: sqlglot is imported
only where SQL is analysed, rewritten or compiled, so the session, the noise, the execution
and the accounting never reach into a syntax tree."""

from __future__ import annotations

import ast
from pathlib import Path

import dpsql

PACKAGE = Path(dpsql.__file__).parent

#: where sqlglot may be imported (design.md, section 1): the analysis and the rewrite (the
#: privacy units' and sample-and-aggregate's own analysis and rewrite modules included), the
#: backends' compile step, the shared SQL text helpers, and the server's catalog front-end
#: (PostgreSQL's introspection queries, answered from the empty shadow schema)
ALLOWED = (
    "analysis/", "rewrite/", "backends/", "sql.py",
    "units/analysis.py", "units/paths.py", "units/identity.py", "units/rewrite.py",
    "units/derived.py", "units/multi.py", "units/multi_rewrite.py", "units/flat_counts.py",
    "sample_aggregate/analysis.py", "sample_aggregate/rewrite.py",
    "sample_aggregate/prepared.py",
    "server/catalog.py",
)


def _imports_sqlglot(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "sqlglot"
                                                for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlglot":
            return True
    return False


def test_sqlglot_is_imported_only_where_sql_is_analysed_rewritten_or_compiled():
    offenders = sorted(
        str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
        if not str(p.relative_to(PACKAGE)).startswith(ALLOWED) and _imports_sqlglot(p))
    assert offenders == []


def test_the_check_sees_an_import():
    assert _imports_sqlglot(PACKAGE / "analysis" / "parse.py")
    assert not _imports_sqlglot(PACKAGE / "noise" / "mechanisms.py")


#: the first design brief lived outside the repository; the design doc is docs/design.md
#: (issue #13: code, README and docs cite it, never a file outside the repository)
OUTSIDE_BRIEF = "DESIGN" + ".md"


def test_nothing_cites_the_design_brief_outside_the_repository():
    root = PACKAGE.parent
    files = [root / "README.md", *root.glob("docs/*.md"), *root.glob("schemas/*"),
             *root.glob("benchmarks/*.py"), root / "benchmarks" / "README.md",
             *PACKAGE.rglob("*.py"), *(root / "tests").rglob("*.py")]
    citing = sorted(str(f.relative_to(root)) for f in files
                    if f.is_file() and OUTSIDE_BRIEF in f.read_text(encoding="utf-8"))
    assert citing == []
