"""Table metadata: the validated model the analysis reads (README.md, "Metadata").

Names are stored lower-case (DuckDB identifiers are case-insensitive); a schema prefix such as
``public.orders`` names the same table as ``orders``.

``load_metadata`` (a file or a parsed mapping) and ``loads_metadata`` (YAML text) read our format
or FLEX's schema.yaml and raise ProgrammingError naming the file, line, table and column of any
problem; ``dump_metadata`` writes our format back. Columns of public tables are always
releasable, with the column itself as their domain unless another is declared.

Modules, one job each:

* :mod:`~dpsql.metadata.model`: the frozen dataclasses :class:`Metadata`, :class:`Table`,
  :class:`Column`, :class:`Domain`, :class:`PrivacyUnit`, :class:`UnitPath`;
* :mod:`~dpsql.metadata.yaml_io`: strict YAML loading with line numbers, and writing our format;
* :mod:`~dpsql.metadata.reader`: the checks both formats share, and building the model;
* :mod:`~dpsql.metadata.ours` and :mod:`~dpsql.metadata.flex`: the two formats;
* :mod:`~dpsql.metadata.unit_paths`: the privacy unit and each table's path to it (ours);
* :mod:`~dpsql.metadata.load`: :func:`load_metadata` and :func:`loads_metadata`;
* :mod:`~dpsql.metadata.build`: drafting a file by profiling a database (owner-side). It
  imports DuckDB, so it is not imported here: ``import dpsql.metadata`` stays light;
  :mod:`~dpsql.metadata.build_units` proposes the unit paths for it, and
  :mod:`~dpsql.metadata.unit_check` checks declared paths on the data (``metadata check -d``).
"""

from __future__ import annotations

from dpsql.metadata.load import load_metadata, loads_metadata
from dpsql.metadata.model import Column, Domain, Metadata, PrivacyUnit, Table, UnitPath
from dpsql.metadata.yaml_io import dump_metadata

__all__ = [
    "Column",
    "Domain",
    "Metadata",
    "PrivacyUnit",
    "Table",
    "UnitPath",
    "dump_metadata",
    "load_metadata",
    "loads_metadata",
]
