"""The house's layering, as the package installs (``pathways_chaos.*``), held by an AST walk.

Rooms are stacked in ``LAYERS``, bottom first. A module may import its own room and any room of a
lower layer; an import of a higher layer's room, or of a sibling room in its own layer, is a
climb. Top-level and function-level imports both count; so do ``if TYPE_CHECKING:`` imports (a
type is a dependency too). Separately, no two modules may import each other, directly or round a
ring. docs/architecture.md draws the same picture in prose; change both together.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import pytest

#: Bottom first. Rooms in one tuple are siblings: neither imports the other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("harness.errors",),
    ("harness.engine",),
    ("faults",),
    ("harness.kube",),
    ("harness.reference",),
    ("harness.blackbox", "harness.judging"),
    ("harness.episodes",),
    ("harness.mtc",),
    ("harness.play", "harness.reports"),
    ("harness.acceptance", "harness.properties"),
    ("fixtures", "harness.search"),
    ("",),  # pathways_chaos/__init__: the public API, lazily re-exporting everything below
    ("suites",),  # they import from the public API, as a user's tests do
    ("harness.pytest_plugin", "harness.cli"),
)

PACKAGES = (
    "pathways_chaos.harness",
    "pathways_chaos.faults",
    "pathways_chaos.fixtures",
    "pathways_chaos.suites",
)


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    where: str  # file:line


def package_dir(name: str) -> Path:
    """Where ``name`` installs from (editable or wheel), found without importing it."""
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations, f"{name} is not installed"
    return Path(next(iter(spec.submodule_search_locations)))


def modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the installed package: dotted name -> (file, is a package)."""
    found: dict[str, tuple[Path, bool]] = {}
    top = package_dir("pathways_chaos")
    found["pathways_chaos"] = (top / "__init__.py", True)
    for package in PACKAGES:
        root = package_dir(package)
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            found[".".join([package, *parts])] = (path, is_package)
    return found


def edges(known: dict[str, tuple[Path, bool]]) -> list[Edge]:
    """Each import of one of our modules, resolved to the module it names."""

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    out: list[Edge] = []
    for source, (path, is_package) in known.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = source.split(".")[: None if is_package else -1]
                    parent = parent[: len(parent) - (node.level - 1)]
                    base = ".".join([*parent, *([node.module] if node.module else [])])
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in known else base)
            for name in targets:
                if not name.startswith("pathways_chaos"):
                    continue
                target = resolve(name)
                if target and target != source:
                    out.append(Edge(source, target, f"{path}:{node.lineno}"))
    return out


def room_of(module: str) -> str | None:
    """The longest room that holds ``module``. ``""`` is pathways_chaos/__init__ and the empty
    harness/__init__, whose folder only groups rooms: nothing below imports either."""
    rest = module.removeprefix("pathways_chaos").removeprefix(".")
    if rest in ("", "harness"):
        return ""
    rooms = [room for layer in LAYERS for room in layer if room]
    holding = [room for room in rooms if rest == room or rest.startswith(room + ".")]
    return max(holding, key=len, default=None)


def layer_of(room: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if room in layer)


def climbs(found: list[Edge]) -> list[str]:
    bad = []
    for edge in found:
        a, b = room_of(edge.source), room_of(edge.target)
        if a is None or b is None:
            continue  # test_every_module_has_a_room reports it
        if a != b and layer_of(a) <= layer_of(b):
            bad.append(
                f"{edge.where}: {edge.source} (room {a or 'pathways_chaos'}, layer "
                f"{layer_of(a)}) imports {edge.target} (room {b}, layer {layer_of(b)})"
            )
    return bad


def circles(found: list[Edge]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {}
    for edge in found:
        graph.setdefault(edge.source, set()).add(edge.target)
        graph.setdefault(edge.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    ring = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        ring.append(member)
                        if member == node:
                            break
                    if len(ring) > 1:
                        out.append(sorted(ring))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out


@pytest.fixture(scope="module")
def known() -> dict[str, tuple[Path, bool]]:
    return modules()


@pytest.fixture(scope="module")
def graph(known: dict[str, tuple[Path, bool]]) -> list[Edge]:
    return edges(known)


def test_every_module_has_a_room(known: dict[str, tuple[Path, bool]]) -> None:
    homeless = [m for m in known if room_of(m) is None]
    assert not homeless, f"give these modules a room in LAYERS: {homeless}"


def test_no_room_is_listed_twice() -> None:
    rooms = [room for layer in LAYERS for room in layer]
    assert len(rooms) == len(set(rooms))


def test_nothing_climbs(graph: list[Edge]) -> None:
    bad = climbs(graph)
    assert not bad, "imports that climb to a higher or sibling room:\n" + "\n".join(bad)


def test_no_circles(graph: list[Edge]) -> None:
    rings = circles(graph)
    assert not rings, "modules that import each other:\n" + "\n".join(map(str, rings))


def test_a_planted_climb_and_circle_are_caught(known: dict[str, tuple[Path, bool]]) -> None:
    """The checks against broken variants: an engine module importing ``play``, a room importing
    its sibling, and a ring of three must all be reported."""
    h = "pathways_chaos.harness."
    planted = [
        Edge(h + "engine.topology", h + "play", "x:1"),
        Edge(h + "engine.clock", h + "engine.recorder", "x:2"),
        Edge(h + "engine.recorder", h + "engine.seams", "x:3"),
        Edge(h + "engine.seams", h + "engine.clock", "x:4"),
        Edge(h + "blackbox.observer", h + "judging", "x:5"),
    ]
    assert [c.split(":")[1] for c in climbs(planted)] == ["1", "5"]
    assert circles(planted) == [[h + "engine.clock", h + "engine.recorder", h + "engine.seams"]]


def test_the_walk_sees_function_level_relative_and_type_checking_imports(tmp_path: Path) -> None:
    """The AST walk finds an import inside a function, under TYPE_CHECKING and a relative one."""
    body = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pathways_chaos.harness.play import play\n"
        "def f():\n    from pathways_chaos.harness.cli import main\n"
        "from .clock import FakeClock\n"
    )
    (tmp_path / "m.py").write_text(body)
    known = {
        "pathways_chaos.harness.engine.m": (tmp_path / "m.py", False),
        "pathways_chaos.harness.engine.clock": (tmp_path / "clock.py", False),
        "pathways_chaos.harness.play": (tmp_path / "play.py", False),
        "pathways_chaos.harness.cli": (tmp_path / "cli.py", True),
        "pathways_chaos.harness.cli.main": (tmp_path / "main.py", False),
    }
    (tmp_path / "clock.py").write_text("")
    (tmp_path / "play.py").write_text("")
    (tmp_path / "cli.py").write_text("")
    (tmp_path / "main.py").write_text("")
    found = {(e.source, e.target) for e in edges(known)}
    m = "pathways_chaos.harness.engine.m"
    assert found == {
        (m, "pathways_chaos.harness.play"),
        (m, "pathways_chaos.harness.cli.main"),
        (m, "pathways_chaos.harness.engine.clock"),
    }
    assert len(climbs(edges(known))) == 2


def architecture_table() -> dict[int, set[str]]:
    """docs/architecture.md's table of rooms: level -> the rooms its row names."""
    import re

    text = (Path(__file__).parents[2] / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows: dict[int, set[str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].isdigit():
            named = set(re.findall(r"`([a-z_.]+)`", cells[1])) - {"__init__"}
            rows[int(cells[0])] = {"" if n == "pathways_chaos" else n for n in named}
    return rows


def test_the_architecture_page_draws_the_layers_the_walk_holds() -> None:
    """The page's table, level by level, names exactly the rooms of ``LAYERS``: a room moved
    in one and not the other fails here."""
    assert architecture_table() == {i: set(rooms) for i, rooms in enumerate(LAYERS)}
