"""Where a process's index comes from and where its value goes, for the ``process-index`` check.

On Pathways one controller runs the whole job: ``jax.process_index()`` is 0, ``process_count()``
is 1, and a TPU VM's per-host id (``TPU_WORKER_ID``) is not in the controller's env. What a use
means there depends on the use, not on where the index was first stored, so an index held in a
name (``rank = jax.process_index()``) is judged at each read of that name, as if written inline.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator

from pathways_chaos.harness.acceptance.sources import SourceFile
from pathways_chaos.harness.acceptance.table import Finding

PROCESS_INDEX = "jax.process_index"
PROCESS_COUNT = "jax.process_count"
#: Per-host ids a TPU VM (or a multislice worker) sets; the Pathways controller has none of them.
HOST_ID_VARS = frozenset({"TPU_WORKER_ID", "CLOUD_TPU_TASK_ID", "MEGASCALE_SLICE_ID"})
ENV_GETTERS = frozenset({"os.getenv", "os.environ.get"})
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Module)


@dataclasses.dataclass(frozen=True)
class IndexRead:
    """A value that is this process's index: ``node`` is the call, or ``int(...)`` around an
    env read; ``env`` names the variable read (empty for ``jax.process_index()``)."""

    node: ast.expr
    env: str = ""

    @property
    def label(self) -> str:
        return self.env or "jax.process_index()"

    @property
    def has_default(self) -> bool:
        """An env read with a default (``os.environ.get(name, 0)``, ``os.getenv(name, "0")``):
        the controller reads it; without one it raises ``KeyError`` or gets ``None``."""
        return any(
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute | ast.Name)
            and getattr(n.func, "attr", getattr(n.func, "id", "")) in ("get", "getenv")
            and (len(n.args) >= 2 or any(k.arg == "default" for k in n.keywords))
            for n in ast.walk(self.node)
        )


def index_reads(f: SourceFile) -> Iterator[IndexRead]:
    """``jax.process_index()`` calls and reads of a per-host id from the environment."""
    reads = [IndexRead(call) for call in f.calls_to([PROCESS_INDEX])]
    for node in ast.walk(f.tree):
        if not isinstance(node, ast.Subscript | ast.Call) or not (env := _host_id_var(f, node)):
            continue
        parent = f.parents.get(node)
        value: ast.expr = node
        if (  # int(os.environ["TPU_WORKER_ID"]): the int is the index
            isinstance(parent, ast.Call)
            and isinstance(parent.func, ast.Name)
            and parent.func.id == "int"
            and parent.args
            and parent.args[0] is node
        ):
            value = parent
        reads.append(IndexRead(value, env))
    yield from sorted(reads, key=lambda r: (r.node.lineno, r.node.col_offset))


def _host_id_var(f: SourceFile, node: ast.Subscript | ast.Call) -> str:
    """``os.environ["TPU_WORKER_ID"]``, ``os.environ.get(...)`` or ``os.getenv(...)``, read."""
    if isinstance(node, ast.Subscript):
        if f.qualname(node.value) != "os.environ" or not isinstance(node.ctx, ast.Load):
            return ""
        key: ast.AST = node.slice
    elif f.qualname(node.func) in ENV_GETTERS and node.args:
        key = node.args[0]
    else:
        return ""
    value = key.value if isinstance(key, ast.Constant) else None
    return value if isinstance(value, str) and value in HOST_ID_VARS else ""


def index_uses(f: SourceFile, read: IndexRead) -> list[tuple[ast.expr, str]]:
    """Where the index's value is used, each with the name holding it (``""`` inline).

    Held in a plain name read in its scope: each read of the name (and a walrus where it
    stands). Otherwise (an attribute such as ``self.shard``, a name bound twice in one
    statement, a name never read here, as a global imported elsewhere) the uses cannot be
    followed, so the binding itself is judged, as before.
    """
    name = bound_name(f, read.node)
    uses: list[tuple[ast.expr, str]] = []
    if name:
        uses += [(use, name) for use in _reads(_scope_of(f, read.node), name)]
    walrus = f.parents.get(read.node)
    if isinstance(walrus, ast.NamedExpr):  # (rank := ...) == 0 is also read where it stands
        uses.insert(0, (walrus, ""))
    return uses or [(read.node, "")]


def bound_name(f: SourceFile, node: ast.AST) -> str:
    """The plain name ``node``'s value is stored in: ``rank = node``, ``rank: int = node``,
    ``(rank := node)`` or ``n, rank = count, node``; ``""`` for any other place."""
    parent = f.parents.get(node)
    target: ast.AST | None = None
    if isinstance(parent, ast.Tuple) and isinstance(stmt := f.parents.get(parent), ast.Assign):
        targets = stmt.targets[0] if len(stmt.targets) == 1 else None
        if isinstance(targets, ast.Tuple) and len(targets.elts) == len(parent.elts):
            target = targets.elts[next(i for i, e in enumerate(parent.elts) if e is node)]
    elif isinstance(parent, ast.Assign) and parent.value is node and len(parent.targets) == 1:
        target = parent.targets[0]
    elif isinstance(parent, ast.AnnAssign | ast.NamedExpr) and parent.value is node:
        target = parent.target
    return target.id if isinstance(target, ast.Name) else ""


def _scope_of(f: SourceFile, node: ast.AST) -> ast.AST:
    return next((p for p in f.ancestors(node) if isinstance(p, SCOPES)), f.tree)


def _reads(scope: ast.AST, name: str) -> list[ast.Name]:
    """Loads of ``name`` in ``scope``, and in the functions nested in it that do not bind a
    ``name`` of their own (a module-level name is read from any function of the module)."""
    out: list[ast.Name] = []
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        if isinstance(node, SCOPES) and _binds(node, name):
            continue
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
            out.append(node)
        todo += ast.iter_child_nodes(node)
    return sorted(out, key=lambda n: (n.lineno, n.col_offset))


def _binds(function: ast.AST, name: str) -> bool:
    """``function`` has a local ``name`` (a parameter or a store not declared global)."""
    if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        a = function.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
        if any(p is not None and p.arg == name for p in params):
            return True
    declared = any(
        isinstance(n, ast.Global | ast.Nonlocal) and name in n.names for n in ast.walk(function)
    )
    stored = any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
        for n in ast.walk(function)
    )
    return stored and not declared


def _count_names(f: SourceFile, node: ast.AST) -> set[str]:
    """Names holding ``jax.process_count()`` in the scopes around ``node``."""
    scopes = {id(s) for s in f.ancestors(node) if isinstance(s, SCOPES)}
    return {
        name
        for call in f.calls_to([PROCESS_COUNT])
        if (name := bound_name(f, call)) and id(_scope_of(f, call)) in scopes
    }


def _mentions_count(f: SourceFile, node: ast.AST, names: set[str]) -> bool:
    """``node`` holds a ``jax.process_count()`` call, or a name bound to one."""
    return next(f.calls_to([PROCESS_COUNT], within=node), None) is not None or any(
        isinstance(n, ast.Name) and n.id in names for n in ast.walk(node)
    )


def with_process_count(f: SourceFile, use: ast.expr) -> bool:
    """Passed to a call beside ``process_count()`` (``ShardOptions(index, count)``), or a
    slice's start with it as the step: shard 0 of 1 under Pathways, the whole dataset."""
    parent = f.parents.get(use)
    if isinstance(parent, ast.keyword):
        parent = f.parents.get(parent)
    if isinstance(parent, ast.Call) and use is parent.func:
        return False
    if not isinstance(parent, ast.Slice | ast.Call):  # data[process_index()::process_count()]
        return False
    return _mentions_count(f, parent, _count_names(f, use))


def guards_the_controller(f: SourceFile, use: ast.expr) -> bool:
    """``jax.process_index() == 0`` (or ``!= 0``, ``not jax.process_index()``, ``==
    jax.process_count() - 1``: the last process is 0 of 1): "am I the controller?", which the
    one controller answers yes, wherever the question stands: an ``if``, or a helper's
    ``return jax.process_index() == 0`` (``is_chief()``), or a flag set from it."""
    parent = f.parents.get(use)
    if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
        return True
    return (
        isinstance(parent, ast.Compare)
        and len(parent.ops) == 1
        and isinstance(parent.ops[0], ast.Eq | ast.NotEq)
        and _is_controller(f, parent.comparators[0] if parent.left is use else parent.left)
    )


def _is_controller(f: SourceFile, other: ast.expr) -> bool:
    """0, or ``process_count() - 1``: the one controller's index."""
    if f.int_constant(other) == 0:
        return True
    return (
        isinstance(other, ast.BinOp)
        and isinstance(other.op, ast.Sub)
        and f.int_constant(other.right) == 1
        and _mentions_count(f, other.left, _count_names(f, other))
    )


def fixed_shard_counts(f: SourceFile) -> list[Finding]:
    """``ShardOptions(i, NUM_HOSTS)`` / ``shard_count=8``: the one controller reads 1/N."""
    out = []
    for node in ast.walk(f.tree):
        if not isinstance(node, ast.Call) or f.ignored(node):
            continue
        func = node.func  # the name as written: ShardOptions, grain.ShardOptions, ...
        callee = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "a call")
        count = next((k.value for k in node.keywords if k.arg == "shard_count"), None)
        if count is None and callee == "ShardOptions" and len(node.args) > 1:
            count = node.args[1]
        n = f.int_constant(count)
        if n is not None and n > 1:
            out.append(
                Finding(
                    f.where(node),
                    f"{callee}(...) reads one shard of {n} (a count fixed at one process per "
                    f"host): under Pathways the one controller reads 1/{n} of the data"
                    + f.branch_note(node),
                )
            )
    return out
