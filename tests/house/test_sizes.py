"""Size limits of the installed package: no module over 600 lines, no function over 80, unless a
``# One piece`` comment at its top says why it stays whole (docs/architecture.md)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
MARK = "# One piece"


def package_files() -> list[Path]:
    """Every module of the installed package, found without importing it."""
    found = []
    for name in ("harness", "faults", "fixtures", "suites"):
        spec = importlib.util.find_spec(f"pathways_chaos.{name}")
        assert spec is not None and spec.submodule_search_locations
        for root in spec.submodule_search_locations:
            found += sorted(Path(root).rglob("*.py"))
    return found


def oversized(path: Path, label: str) -> list[str]:
    """Each module or function of ``path`` over its limit that does not say why, one line each."""
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text, str(path))
    bad = []
    if len(lines) > MAX_MODULE_LINES:
        # the comment goes after the module docstring, before the first import
        first = next((n.lineno for n in tree.body if not isinstance(n, ast.Expr)), len(lines))
        if not any(line.startswith(MARK) for line in lines[: first - 1]):
            bad.append(f"{label}: module of {len(lines)} lines")
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            assert node.end_lineno is not None
            size = node.end_lineno - start + 1
            has_doc = ast.get_docstring(node) is not None and len(node.body) > 1
            after = node.body[0].end_lineno if has_doc else node.lineno
            first = node.body[1 if has_doc else 0].lineno
            assert after is not None
            top = lines[after : first - 1]  # the comments before the first statement
            if size > MAX_FUNCTION_LINES and not any(MARK in line for line in top):
                bad.append(f"{label}:{node.lineno}: {node.name} is {size} lines")
    return bad


def test_no_module_or_function_is_over_its_limit_without_saying_why() -> None:
    bad = [line for path in package_files() for line in oversized(path, str(path))]
    assert not bad, f"split these, or start them with a '{MARK} (...): why' comment:\n" + "\n".join(
        bad
    )


def test_a_long_module_and_function_without_a_reason_are_caught(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    long_function = f"def f():\n{body}\n"
    path = tmp_path / "m.py"
    path.write_text('"""doc"""\n\nimport os\n\n' + long_function + "\n" * MAX_MODULE_LINES)
    found = oversized(path, "m")
    assert len(found) == 2 and "module of" in found[0]
    assert found[1] == f"m:5: f is {MAX_FUNCTION_LINES + 1} lines"
    reasoned = long_function.replace("def f():\n", f"def f():\n    {MARK} (test): a table\n")
    path.write_text(f'"""doc"""\n\n{MARK} (test): one table\nimport os\n\n{reasoned}')
    path.write_text(path.read_text() + "\n" * MAX_MODULE_LINES)
    assert oversized(path, "m") == []
