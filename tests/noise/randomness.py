"""A static guard shared by the noise modules' tests (not a test module): a module's source
imports no ``random``/``numpy.random``/``secrets`` and touches no ``np.random``."""

from __future__ import annotations

import ast
import inspect
from types import ModuleType


def assert_secure_randomness(module: ModuleType, *, reads_urandom: bool) -> None:
    """Fail if ``module`` could draw from a non-secure or seedable generator; with
    ``reads_urandom``, also require that it reads ``os.urandom`` itself."""
    tree = ast.parse(inspect.getsource(module))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not imported & {"random", "numpy.random", "secrets"}
    attributes = {(n.value.id, n.attr) for n in ast.walk(tree)
                  if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
    assert ("np", "random") not in attributes and ("numpy", "random") not in attributes
    if reads_urandom:
        assert ("os", "urandom") in attributes
