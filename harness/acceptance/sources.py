"""A team's Python files as the static checks read them: parsed, with each file's import aliases
(so ``import jax as j`` and ``from jax import process_index`` resolve to ``jax.*``) and parent
links, and the ``# pathways-chaos: ignore`` mark honoured."""

from __future__ import annotations

import ast
import dataclasses
import functools
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pathways_chaos.harness.engine.untrusted_files import shown
from pathways_chaos.harness.errors import ChaosConfigError

IGNORE_MARK = "pathways-chaos: ignore"
#: PEP 263's coding line, as the tokenizer looks for it in a file's first two lines.
_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*[-\w.]+", re.MULTILINE)
SKIP_DIRS = frozenset({".git", "__pycache__", ".venv", "venv", ".tox", "node_modules", "build"})


@dataclasses.dataclass
class SourceFile:
    """A parsed file with its import aliases and parent links."""

    path: Path
    label: str
    tree: ast.Module
    lines: list[str]
    aliases: dict[str, str]
    parents: dict[ast.AST, ast.AST]

    def where(self, node: ast.AST) -> str:
        return f"{self.label}:{getattr(node, 'lineno', 0)}"

    def ignored(self, node: ast.AST) -> bool:
        line = getattr(node, "lineno", 0)
        return 0 < line <= len(self.lines) and IGNORE_MARK in self.lines[line - 1]

    def qualname(self, node: ast.AST) -> str | None:
        """``jax.process_index`` for ``j.process_index`` after ``import jax as j``, and so on."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def calls_to(self, names: Iterable[str], within: ast.AST | None = None) -> Iterator[ast.Call]:
        """Calls to any of ``names``, in source order."""
        wanted = frozenset(names)
        calls = [
            node
            for node in ast.walk(within or self.tree)
            if isinstance(node, ast.Call) and self.qualname(node.func) in wanted
        ]
        yield from sorted(calls, key=lambda n: (n.lineno, n.col_offset))

    def int_constant(self, node: ast.AST | None) -> int | None:
        """An int written as a literal, or a module-level name bound to one exactly once
        (``NUM_HOSTS = 8``): what a check can read without running the code."""
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        return self._module_ints.get(node.id) if isinstance(node, ast.Name) else None

    def bool_constant(self, name: str) -> bool | None:
        """A module-level name bound once to ``True`` or ``False`` (``ON_TPU_VM = False``)."""
        value = self._module_constants.get(name)
        return value if type(value) is bool else None

    @functools.cached_property
    def _module_ints(self) -> dict[str, int]:
        return {n: v for n, v in self._module_constants.items() if type(v) is int}

    @functools.cached_property
    def _module_constants(self) -> dict[str, Any]:
        """Module-level names bound once, to an int or bool literal, and stored nowhere else in
        the module's other statements: read once per file, not once per name looked up."""
        bound: dict[str, list[ast.expr | None]] = {}
        for stmt in self.tree.body:
            if isinstance(stmt, ast.Assign | ast.AnnAssign):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for name in {t.id for t in targets if isinstance(t, ast.Name)}:
                    bound.setdefault(name, []).append(stmt.value)
        stored_elsewhere = {
            n.id
            for stmt in self.tree.body
            if not isinstance(stmt, ast.Assign | ast.AnnAssign)
            for n in ast.walk(stmt)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        return {
            name: values[0].value
            for name, values in bound.items()
            if len(values) == 1
            and name not in stored_elsewhere
            and isinstance(values[0], ast.Constant)
            and type(values[0].value) in (int, bool)
        }

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        while node in self.parents:
            node = self.parents[node]
            yield node

    def branches(self, node: ast.AST) -> Iterator[tuple[ast.If, bool]]:
        """The ``if`` statements ``node`` is inside, innermost first, each with whether
        ``node`` is in its body (else in its ``else``); not those whose test it is in."""
        child = node
        for parent in self.ancestors(node):
            if isinstance(parent, ast.If) and child is not parent.test:
                yield parent, child in parent.body
            child = parent

    def branch_note(self, node: ast.AST) -> str:
        """Where ``node`` is in a branch on a name (a legacy path behind a flag such as ``if
        not ON_PATHWAYS:``), how to say it never runs on Pathways: a flag read at run time is
        not something a static check can know."""
        for branch, in_body in self.branches(node):
            if _is_flag(branch.test):
                test = ast.unparse(branch.test)
                taken = test if in_body else f"not ({test})"
                return (
                    f" (in the branch taken when {shown(taken, 60)}, line {branch.lineno}: "
                    "if it never runs on Pathways, mark this line '# pathways-chaos: ignore')"
                )
        return ""

    @property
    def is_elastic(self) -> bool:
        """Imports pathwaysutils or uses ``elastic_retry``: meshes here must follow slices."""
        if any(v.split(".")[0] == "pathwaysutils" for v in self.aliases.values()):
            return True
        return any(
            isinstance(n, ast.Attribute) and n.attr == "elastic_retry" for n in ast.walk(self.tree)
        )


def _is_flag(test: ast.expr) -> bool:
    """A test on a setting: a name or attribute (``ON_PATHWAYS``, ``cfg.legacy``), ``not`` one,
    or one compared with a constant (``MODE == "multi_controller"``); not ``__name__ ==
    "__main__"``, nor a test on the loop's own values (``step % 10 == 0``)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    if isinstance(test, ast.Compare) and len(test.comparators) == 1:
        if not isinstance(test.comparators[0], ast.Constant):
            return False
        test = test.left
    if isinstance(test, ast.Call) and not test.args and not test.keywords:  # use_legacy()
        test = test.func
    if isinstance(test, ast.Name):
        return test.id != "__name__"
    return isinstance(test, ast.Attribute) and isinstance(test.value, ast.Name | ast.Attribute)


def load_sources(paths: Sequence[str | Path]) -> list[SourceFile]:
    """Every ``.py`` file under ``paths`` (files or folders), parsed."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not str(raw).strip():  # Path("") is ".": the current folder, never what was meant
            raise ChaosConfigError(
                "--acceptance-source is empty: pass your training code's folder or file"
            )
        if path.is_dir():
            files += sorted(python_files(path))
        elif path.is_file():
            files.append(path)
        else:
            raise ChaosConfigError(
                f"--acceptance-source {raw}: no such file or folder: pass your training code's "
                "folder or file"
            )
    if not files:
        raise ChaosConfigError(
            f"--acceptance-source {', '.join(map(str, paths))}: no .py files found: pass the "
            "folder that holds your training code"
        )
    return [parse_source(f) for f in files]


def read_source_text(path: Path, what: str = "--acceptance-source file") -> str:
    """The file's text as Python reads it (a BOM, a PEP 263 coding line), from a regular,
    size-limited file: the one reader, so the check before the session and the parse agree."""
    from pathways_chaos.harness.engine.untrusted_files import (
        decode_python,
        decode_utf8,
        read_bytes,
    )

    data = read_bytes(path, what=what)
    head = b"\n".join(data.split(b"\n", 2)[:2])
    if not _CODING.search(head):  # no coding line: UTF-8, a bad byte named as such, not as
        return decode_utf8(data.removeprefix(b"\xef\xbb\xbf"), path, what=what)  # a bad line
    return decode_python(data, path, what=what)


def parse_source(path: Path) -> SourceFile:
    text = read_source_text(path)
    label = _label(path)
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as error:
        raise ChaosConfigError(
            f"{label}:{error.lineno}: cannot parse ({error.msg}): fix the syntax or leave the "
            "file out of --acceptance-source"
        ) from None
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    return SourceFile(path, label, tree, text.splitlines(), _aliases(tree), parents)


def python_files(folder: Path) -> Iterator[Path]:
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        yield from (Path(root) / n for n in sorted(names) if n.endswith(".py"))


def _label(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> the dotted name it stands for, from every import in the file."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    out[a.asname] = a.name
                else:
                    root = a.name.split(".")[0]
                    out[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out
