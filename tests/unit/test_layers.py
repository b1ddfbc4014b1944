"""The direction of hub's imports, as a test: layers import downwards only, never in a circle; and
the unit tests' folders mirror the packages they test.

Every import statement counts, those under ``if TYPE_CHECKING:`` and inside functions too: a circle
of annotations is still a circle a reader has to hold in mind. docs/architecture.md draws the layers;
docs/contributing.md says where a new test goes.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import REPO

HUB = REPO / "hub"

# Each package of hub/ and its layer: a module may import its own package and lower layers. The
# simulation and the metrics that read its records share a layer: the records are the simulation's,
# and live policies (SLO autoscaling, conversations) read the latency statistics.
LAYERS = {
    "errors": 0, "native": 0,
    "config": 1, "backends": 1,
    "sim": 2, "metrics": 2,
    "timing": 3,
    "studies": 4,
    "service": 5,
    "cli": 6, "__init__": 6,
}


def modules() -> dict[str, Path]:
    """Every module of hub, by its dotted name under cosim.hub ('' for the package itself)."""
    found = {}
    for path in HUB.rglob("*.py"):
        parts = list(path.relative_to(HUB).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = modules()


def imports(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """The hub modules ``name`` imports, with the line of each import (anywhere in the file)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[:len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module and (node.module == "cosim.hub" or node.module.startswith("cosim.hub.")):
                target = node.module[len("cosim.hub"):].lstrip(".")
            else:
                continue
            submodules = [f"{target}.{a.name}".lstrip(".") for a in node.names
                          if f"{target}.{a.name}".lstrip(".") in MODULES]
            yield from ((sub, node.lineno) for sub in submodules)
            if len(submodules) < len(node.names):  # names defined by the module itself
                yield target, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("cosim.hub."):
                    yield alias.name[len("cosim.hub."):], node.lineno


GRAPH = {name: sorted({t for t, _ in imports(name, path) if t in MODULES and t != name})
         for name, path in MODULES.items()}


def layer(name: str) -> int:
    return LAYERS[name.split(".")[0] or "__init__"]


def test_every_package_of_hub_has_a_layer() -> None:
    assert {name.split(".")[0] or "__init__" for name in MODULES} <= set(LAYERS)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_module_imports_only_its_own_package_and_lower_layers(name: str) -> None:
    upward = [target for target in GRAPH[name] if layer(target) > layer(name)]
    assert not upward, f"hub/{name.replace('.', '/')} imports {upward}, of a layer above its own"


def test_the_simulation_never_imports_the_speed_devices_studies_or_service() -> None:
    """Spelled out, as the layers above say it: sim/ is the semantics, whatever makes it fast."""
    crossing = [(name, target) for name, targets in GRAPH.items() if name.startswith("sim")
                for target in targets if target.split(".")[0] in ("timing", "studies", "service", "cli")]
    assert not crossing


def test_hub_imports_no_adapter_when_it_loads() -> None:
    """The hub reaches backends through the stubs; a command may import an adapter when it runs."""
    loaded = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        for node in tree.body:  # module level only: imports inside a function run when it is called
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            loaded += [(name, n) for n in names if n.startswith("cosim.adapters")]
    assert not loaded


def cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in sorted(GRAPH):
        if name not in index:
            visit(name)
    return found


def test_no_import_circle() -> None:
    assert cycles() == []


def test_a_circle_is_found() -> None:
    """The check itself: a circle added to the graph is reported."""
    GRAPH["sim.kernel"].append("sim.coordinator")
    try:
        assert any({"sim.coordinator", "sim.kernel"} <= set(circle) for circle in cycles())
    finally:
        GRAPH["sim.kernel"].remove("sim.coordinator")


UNIT = REPO / "tests" / "unit"
TREE_TESTS = {"test_layers.py"}  # tests of the tree as a whole, the only ones directly in tests/unit


def layout_problems(unit: Path, repo: Path) -> list[str]:
    """Where ``unit`` strays from the packages it mirrors: ``unit/<pkg>/`` holds the tests of
    ``hub/<pkg>/`` and ``unit/adapters/<name>/`` those of ``adapters/<name>/`` (subfolders likewise),
    each folder a package (test modules import each other as ``tests.unit...``), and a test file sits
    in the folder of the package it tests."""
    problems = []
    for folder in sorted(unit.rglob("*")):
        parts = folder.relative_to(unit).parts
        if not folder.is_dir() or any(part.startswith((".", "__")) for part in parts):
            continue
        source = repo.joinpath("adapters", *parts[1:]) if parts[0] == "adapters" else repo.joinpath("hub", *parts)
        if not (source / "__init__.py").is_file():
            problems.append(f"{folder.relative_to(unit)}/ mirrors no package: {source.relative_to(repo)}/ is none")
        if not (folder / "__init__.py").is_file():
            problems.append(f"{folder.relative_to(unit)}/ has no __init__.py")
    stray = [p for p in unit.glob("test_*.py") if p.name not in TREE_TESTS] + sorted(unit.glob("adapters/test_*.py"))
    problems += [f"{p.relative_to(unit)} is not in the folder of the package it tests" for p in sorted(stray)]
    return problems


def test_unit_tests_mirror_the_packages() -> None:
    assert layout_problems(UNIT, REPO) == []


def test_a_stray_test_or_folder_is_found(tmp_path: Path) -> None:
    """The check itself, on a made-up tree: a folder without a package, a folder that is no package,
    and test files beside the folders rather than in them."""
    repo, unit = tmp_path, tmp_path / "tests" / "unit"
    for package in ("hub/sim", "adapters", "adapters/roofline", "tests/unit", "tests/unit/sim", "tests/unit/adapters",
                    "tests/unit/adapters/roofline", "tests/unit/simulation", "tests/unit/adapters/genz"):
        (repo / package).mkdir(parents=True, exist_ok=True)
        (repo / package / "__init__.py").touch()
    (unit / "sim" / "scheduling").mkdir()
    for test in ("test_layers.py", "sim/test_kernel.py", "adapters/roofline/test_roofline.py", "test_router.py",
                 "adapters/test_genz.py", "sim/scheduling/test_free_queue.py"):
        (unit / test).touch()
    assert layout_problems(unit, repo) == [
        "adapters/genz/ mirrors no package: adapters/genz/ is none",
        "sim/scheduling/ mirrors no package: hub/sim/scheduling/ is none",
        "sim/scheduling/ has no __init__.py",
        "simulation/ mirrors no package: hub/simulation/ is none",
        "adapters/test_genz.py is not in the folder of the package it tests",
        "test_router.py is not in the folder of the package it tests",
    ]
