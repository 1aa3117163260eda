"""dpsql.metadata.yaml_io's strict loader reads the same documents, with the same line numbers,
on libyaml's parser (used when PyYAML has it) as on PyYAML's pure-Python one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dpsql.errors import ProgrammingError
from dpsql.metadata import dump_metadata, loads_metadata
from dpsql.metadata.yaml_io import _Map, _parse_yaml, _PureStrictLoader, _StrictLoader
from tests.shop_fixture import build_shop

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted([*ROOT.glob("schemas/*.yaml"), *ROOT.glob("tests/**/fixtures/*.yaml"),
                ROOT / "benchmarks" / "pums_owner.yaml"])


def _shape(node: object) -> object:
    """The document with each mapping's own line and key lines spelled out."""
    if isinstance(node, _Map):
        return ("map", node.line, node.lines, {k: _shape(v) for k, v in node.items()})
    if isinstance(node, list):
        return [_shape(v) for v in node]
    return (type(node).__name__, node)


def _both(text: str) -> tuple[object, object]:
    """The document read by the fast loader and by the pure-Python one (both SafeLoaders)."""
    return (yaml.load(text, Loader=_StrictLoader),
            yaml.load(text, Loader=_PureStrictLoader))


def test_the_fast_parser_is_used_when_pyyaml_has_libyaml():
    assert issubclass(_StrictLoader, getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_file_reads_the_same_under_both_parsers(path):
    fast, pure = _both(path.read_text(encoding="utf-8"))
    assert _shape(fast) == _shape(pure)
    assert isinstance(fast, _Map) and fast.lines  # line numbers kept


def test_the_test_shop_reads_the_same_under_both_parsers(tmp_path):
    text = build_shop(tmp_path / "shop.duckdb").metadata_yaml()
    fast, pure = _both(text)
    assert _shape(fast) == _shape(pure)


@pytest.mark.parametrize("text", [
    "tables:\n  t: {}\n  t: {}\n",
    "a:\n  b: 1\n  c: 2\n  b: 3\n",
])
def test_duplicate_keys_are_refused_under_both_parsers(text):
    for loader in (_StrictLoader, _PureStrictLoader):
        with pytest.raises(yaml.YAMLError):
            yaml.load(text, Loader=loader)
    with pytest.raises(ProgrammingError, match="appears twice"):
        _parse_yaml(text, "m.yaml")


def test_keys_stay_as_written_under_both_parsers():
    fast, pure = _both("no: 1\n2020: yes\nnull: ~\n")
    assert list(fast) == list(pure) == ["no", "2020", "null"]
    assert fast == pure == {"no": 1, "2020": True, "null": None}


def test_awkward_names_dumped_read_back_equal(tmp_path):
    names = ["no", "a,b", "[x", "caf\u00e9", "tab\there", "del\x7fchar", "'q'", "#c", "2020"]
    tables = {name: {"rows": 10, "columns": {"c": {"type": "int"}}} for name in names}
    metadata = loads_metadata(yaml.safe_dump({"tables": tables}))
    text = dump_metadata(metadata)
    fast, pure = _both(text)
    assert _shape(fast) == _shape(pure)
    assert sorted(loads_metadata(text).tables) == sorted(metadata.tables)
