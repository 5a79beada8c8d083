"""The benches import what they use inside their functions too (to start fast): each of those imports must resolve,
or a bench breaks unseen when a module moves, since no test runs the benches whole."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def imports_of(path: Path) -> list[tuple[str, str | None, int]]:
    """(module, name or None, line) of every import in the file, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.extend((node.module, alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.extend((alias.name, None, node.lineno) for alias in node.names)
    return found


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda path: path.name)
def test_every_import_of_a_bench_resolves(path):
    missing = []
    for module, name, line in imports_of(path):
        try:
            imported = importlib.import_module(module)
        except ImportError as error:
            missing.append(f"{path.name}:{line}: {module}: {error}")
            continue
        if name is not None and name != "*" and not hasattr(imported, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{path.name}:{line}: {module} has no {name}")
    assert not missing, missing
