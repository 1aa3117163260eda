"""Rewrite the test modules' asserts once, in the controller, before the xdist workers start
(not a test module; tests/conftest.py calls :func:`prewrite` from ``pytest_configure``).

pytest rewrites every test module's ``assert`` statements as it imports it (~5 CPU-s for this
suite's ~300 modules) and caches the result in ``__pycache__/*.pyc`` with a ``pytest`` tag --
unless ``PYTHONDONTWRITEBYTECODE`` is set (as on this project's machines) or the tree is a fresh
clone. Then EACH xdist worker, since each collects every module, rewrites every module again.
Here the controller writes the missing or stale cache files first, split over as many forked
processes as there will be workers, and the workers only read them (pytest checks each cache
file against its source's mtime and size, so an edited module is rewritten as before).

It uses pytest's own rewriting functions (``_pytest.assertion.rewrite``, private, pytest
pinned in pyproject.toml): the cached code is what the workers would have written. If that API
changes, nothing is written and the workers rewrite as they always did.
"""

from __future__ import annotations

import fnmatch
import os
import types
from pathlib import Path

import pytest


def _test_modules(config: pytest.Config) -> list[Path]:
    """The modules pytest will rewrite under the run's arguments: test files (the
    ``python_files`` patterns) and conftest.py files."""
    patterns = [p for p in config.getini("python_files") if "/" not in p]
    base = Path(config.invocation_params.dir)
    found: set[Path] = set()
    for arg in config.args:
        path = (base / arg.split("::", 1)[0]).resolve()
        files = path.rglob("*.py") if path.is_dir() else [path] if path.suffix == ".py" else []
        for file in files:
            if file.name == "conftest.py" or any(fnmatch.fnmatch(file.name, p)
                                                 for p in patterns):
                found.add(file)
        for parent in path.parents:  # the conftest files above an argument
            if (parent / "conftest.py").is_file():
                found.add(parent / "conftest.py")
            if parent == config.rootpath:
                break
    return sorted(found)


def prewrite(config: pytest.Config) -> None:
    """Write pytest's rewritten-module cache for the run's test modules, in parallel, when
    xdist workers will start and asserts are rewritten (module docstring)."""
    workers = len(getattr(config.option, "tx", None) or ())
    if workers < 2 or config.getoption("assertmode") != "rewrite" or not hasattr(os, "fork"):
        return
    try:
        from _pytest.assertion.rewrite import (
            PYC_TAIL,
            _read_pyc,
            _rewrite_test,
            _write_pyc,
            get_cache_dir,
        )
    except ImportError:
        return
    quiet = types.SimpleNamespace(trace=lambda _message: None)  # _write_pyc's trace on errors
    pending = []
    for module in _test_modules(config):
        pyc = get_cache_dir(module) / (module.name[:-3] + PYC_TAIL)
        if _read_pyc(module, pyc) is None:
            pending.append((module, pyc))
    if not pending:
        return

    def write(share: list[tuple[Path, Path]]) -> None:
        for module, pyc in share:
            try:
                pyc.parent.mkdir(exist_ok=True)
                stat, code = _rewrite_test(module, config)
                _write_pyc(quiet, code, stat, pyc)  # atomic: a temporary file, then rename
            except (OSError, SyntaxError):
                pass  # the worker importing it rewrites it (and reports a syntax error)

    processes = min(workers, os.cpu_count() or 1, len(pending))
    children = []
    for index in range(1, processes):
        pid = os.fork()
        if pid == 0:  # a child: its share, then exit without running the parent's cleanup
            try:
                write(pending[index::processes])
            finally:
                os._exit(0)
        children.append(pid)
    write(pending[0::processes])
    for pid in children:
        os.waitpid(pid, 0)
