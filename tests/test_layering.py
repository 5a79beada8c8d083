"""The domain core imports neither Dagster nor Spark: every module of `kafka_lake` is imported in a fresh interpreter,
and none of them may bring either in."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import kafka_lake

REPO = Path(__file__).resolve().parent.parent
FORBIDDEN = ("dagster", "pyspark", "dagster_pyspark", "dagster_aws")

IMPORT_EVERY_MODULE = """
import importlib, json, sys
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[2])))))
"""


def test_no_module_of_the_domain_core_imports_dagster_or_spark():
    modules = sorted(m.name for m in pkgutil.walk_packages(kafka_lake.__path__, "kafka_lake."))
    assert len(modules) > 30, modules  # the whole core, not an empty package

    found = subprocess.run([sys.executable, "-c", IMPORT_EVERY_MODULE, json.dumps(modules), json.dumps(FORBIDDEN)],
                           cwd=REPO, capture_output=True, text=True, check=True, timeout=120)

    assert json.loads(found.stdout.strip().splitlines()[-1]) == []


# The floor plan of docs/ARCHITECTURE.md, from the bottom: the ground floor's modules, the wings in order, the top.
GROUND = ("hours", "event_time", "settings", "table_spec")
WINGS = ("lake", "kafka", "schemas", "decoding", "upkeep", "tables", "current", "landing", "topics")
TOP = ("asks", "automation", "metrics", "run_plan")
MOST_TOP_LEVEL_MODULES = 10


def floor_of(module: str) -> int:
    """The floor of a module of the core: 0 for the ground floor, 1.. for the wings in order, above them the top."""
    name = module.split(".")[1]
    if name in GROUND:
        return 0
    if name in TOP:
        return len(WINGS) + 1
    return WINGS.index(name) + 1


def imports_of(path: Path) -> set[str]:
    """Every module of the core a file imports, at its top or inside a function or a TYPE_CHECKING block."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if node.module == "kafka_lake":
                found.update(f"kafka_lake.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("kafka_lake.")}


def test_each_wing_imports_only_the_ground_floor_and_the_wings_below_it():
    core = REPO / "kafka_lake"
    placed = {p.name.removesuffix(".py") for p in core.iterdir() if not p.name.startswith("_")}
    assert placed == set(GROUND) | set(WINGS) | set(TOP), "a module or wing of the core is not in the floor plan"
    upward = []
    for path in sorted(core.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        if len(parts) == 2 and parts[1] == "__init__":
            continue
        module = ".".join(parts)
        for imported in imports_of(path):
            if floor_of(imported) > floor_of(module):
                upward.append(f"{module} imports {imported}")
    assert upward == []


def test_the_ground_floor_imports_no_wing_and_the_core_has_few_top_level_modules():
    core = REPO / "kafka_lake"
    top_level = [p for p in core.glob("*.py") if p.name != "__init__.py"]
    assert len(top_level) <= MOST_TOP_LEVEL_MODULES, top_level
    for name in GROUND:
        assert all(floor_of(imported) == 0 for imported in imports_of(core / f"{name}.py")), name


def test_the_core_has_no_import_circle():
    core = REPO / "kafka_lake"
    graph = {}
    for path in core.rglob("*.py"):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        graph[module] = {name for name in imports_of(path) if name != module}
    modules = set(graph)
    graph = {m: {n for n in targets if n in modules} for m, targets in graph.items()}
    state: dict[str, int] = {}
    circles = []

    def visit(module: str, trail: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                circles.append(trail[trail.index(target):] + [target] if target in trail else [module, target])
            elif target not in state:
                visit(target, trail + [target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert circles == []


# Every module of these folders starts with a docstring of at most this many lines saying its job; a longer why sits
# beside the code it explains.
DOCUMENTED = ("kafka_lake", "spark_jobs", "resources", "deploy")
MOST_MODULE_DOCSTRING_LINES = 2


def module_docstring_lines(path: Path) -> list[str] | None:
    """The non-blank lines of a module's docstring; None when it has none."""
    docstring = ast.get_docstring(ast.parse(path.read_text()), clean=False)
    return None if docstring is None else [line for line in docstring.strip().split("\n") if line.strip()]


def test_every_module_starts_with_a_docstring_of_at_most_two_lines():
    modules = sorted(path for folder in DOCUMENTED for path in (REPO / folder).rglob("*.py"))
    assert len(modules) > 50, modules  # every folder, not an empty glob

    wrong = {}
    for path in modules:
        lines = module_docstring_lines(path)
        if not lines:
            wrong[str(path.relative_to(REPO))] = "no docstring"
        elif len(lines) > MOST_MODULE_DOCSTRING_LINES:
            wrong[str(path.relative_to(REPO))] = f"{len(lines)} lines"

    assert wrong == {}
