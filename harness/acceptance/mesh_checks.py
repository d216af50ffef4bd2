"""The mesh-from-jax-devices check: a mesh built from every device in elastic code.

``jax.devices()`` keeps the initial allocation for the client's lifetime, so a mesh built from
it (or by ``jax.make_mesh``/``create_device_mesh`` without ``devices=``) still holds a slice
that was lost. Checked in elastic files and in the helpers of other files they import.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path

from pathways_chaos.harness.acceptance.sources import SourceFile
from pathways_chaos.harness.acceptance.table import Finding

DEVICE_LISTS = frozenset({"jax.devices", "jax.local_devices"})
MESH_BUILDERS = frozenset(
    {
        "jax.sharding.Mesh",
        "jax.make_mesh",
        "jax.experimental.mesh_utils.create_device_mesh",
        "jax.experimental.mesh_utils.create_hybrid_device_mesh",
    }
)


def mesh_findings(files: Sequence[SourceFile]) -> list[Finding]:
    """A mesh from ``jax.devices()`` in elastic code still holds the slice that was lost: in
    an elastic file, or in a helper of another file an elastic file imports (a team's
    ``partitioning.make_mesh``, kept apart from the Pathways imports)."""
    findings: list[Finding] = []
    helpers: dict[tuple[str, str], _Helper] = {}  # (module, function) -> its meshes
    for f in files:
        for call, said in _meshes_from_all_devices(f):
            if f.is_elastic:
                findings.append(Finding(f.where(call), said))
            elif (function := _enclosing_function(f, call)) is not None:
                for module in _module_names(f):
                    helper = helpers.setdefault((module, function.name), _Helper(function))
                    helper.findings.append(Finding(f.where(call), said))
    for f in files:
        if f.is_elastic:
            findings += _helpers_used(f, helpers)
    return findings


@dataclasses.dataclass
class _Helper:
    function: ast.FunctionDef | ast.AsyncFunctionDef
    findings: list[Finding] = dataclasses.field(default_factory=list)

    @property
    def devices_parameter(self) -> tuple[str, int] | None:
        """``devices=None`` (MaxText's ``create_device_mesh(config, devices=None)``): the
        helper falls back to every device only when a caller leaves the devices out."""
        names = [a.arg for a in [*self.function.args.posonlyargs, *self.function.args.args]]
        kw = [a.arg for a in self.function.args.kwonlyargs]
        for index, name in enumerate(names + kw):
            if "devices" in name:
                return name, index if index < len(names) else -1
        return None

    def passed_devices(self, call: ast.Call) -> bool:
        parameter = self.devices_parameter
        if parameter is None:
            return False
        name, index = parameter
        return any(k.arg == name for k in call.keywords) or 0 <= index < len(call.args)


def _helpers_used(f: SourceFile, helpers: dict[tuple[str, str], _Helper]) -> list[Finding]:
    """The meshes of the helpers elastic file ``f`` uses: imported (``from partitioning import
    make_mesh as build``) or called through its module (``partitioning.make_mesh(...)``). A
    helper taking the devices is judged at each call: only one that leaves them out."""
    out = []
    calls: dict[str, list[ast.Call]] = {}
    for node in ast.walk(f.tree):
        if isinstance(node, ast.Call) and (dotted := f.qualname(node.func)) is not None:
            calls.setdefault(dotted, []).append(node)
    used = {dotted: f"imports as {local}" for local, dotted in f.aliases.items()}
    used.update({dotted: f"calls at line {c[0].lineno}" for dotted, c in calls.items()})
    for dotted, how in used.items():
        module, _, function = dotted.rpartition(".")
        helper = helpers.get((module, function))
        if helper is None:
            continue
        if helper.devices_parameter is not None:
            bare = [c for c in calls.get(dotted, []) if not helper.passed_devices(c)]
            if not bare:
                continue
            how = f"calls without its {helper.devices_parameter[0]} at line {bare[0].lineno}"
        out += [
            dataclasses.replace(
                found,
                message=f"{found.message}, in {dotted}(), which the elastic {f.label} {how}",
            )
            for found in helper.findings
        ]
    return out


def _meshes_from_all_devices(f: SourceFile) -> Iterator[tuple[ast.Call, str]]:
    """Each mesh ``f`` builds from every device, with what it is built from."""
    for call in f.calls_to(MESH_BUILDERS):
        if f.ignored(call):
            continue
        builder = f.qualname(call.func) or "mesh"
        tainted = _device_list_names(f, _scope_of(f, call))
        source = _device_list_source(f, call, tainted)
        if source:  # named as written: jax.local_devices() is not jax.devices()
            yield call, f"{builder}(...) is built from {source}()"
        elif builder.endswith(("make_mesh", "create_device_mesh", "hybrid_device_mesh")) and (
            not _has_devices_argument(call, builder)
        ):
            yield call, f"{builder}(...) without devices= takes jax.devices(), every slice"


def _enclosing_function(
    f: SourceFile, node: ast.AST
) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The module-level function ``node`` is in (what another file imports by its name)."""
    outer = None
    for parent in f.ancestors(node):
        if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef):
            outer = parent
    return outer if outer is not None and outer in f.tree.body else None


def _module_names(f: SourceFile) -> list[str]:
    """The dotted names another file may import ``f`` by: its stem, and its path's folders
    before it (``t5x_port.partitioning``, ``src.t5x_port.partitioning``...)."""
    parts = [p for p in Path(f.label).with_suffix("").parts if p not in ("", ".", "..", "/")]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return [".".join(parts[i:]) for i in range(len(parts))]


def _scope_of(f: SourceFile, node: ast.AST) -> ast.AST:
    for parent in f.ancestors(node):
        if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module):
            return parent
    return f.tree


def _device_list_names(f: SourceFile, scope: ast.AST) -> dict[str, str]:
    """Names in ``scope`` (and the module) whose value derives from ``jax.devices()`` (or
    ``jax.local_devices()``), each with the device list it came from."""
    assignments: list[tuple[list[str], ast.AST]] = []
    for s in {scope, f.tree}:
        nodes = ast.walk(s) if s is not f.tree else iter(f.tree.body)
        for node in nodes:
            if isinstance(node, ast.Assign):
                names = [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
                assignments.append((names, node.value))
            elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
                target = node.target
                if isinstance(target, ast.Name):
                    assignments.append(([target.id], node.value))
    tainted: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for names, value in assignments:
            if set(names) <= set(tainted):
                continue
            source = _device_list_source(f, value, tainted)
            if source:
                tainted.update(dict.fromkeys(names, source))
                changed = True
    return tainted


def _device_list_source(f: SourceFile, node: ast.AST, tainted: dict[str, str]) -> str | None:
    """The device list (``jax.devices`` or ``jax.local_devices``) ``node`` is made from."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            name = f.qualname(n.func)
            if name in DEVICE_LISTS:
                return name
        if isinstance(n, ast.Name) and n.id in tainted and isinstance(n.ctx, ast.Load):
            return tainted[n.id]
    return None


def _has_devices_argument(call: ast.Call, builder: str) -> bool:
    """``make_mesh`` takes devices by keyword only; the mesh_utils builders also by position."""
    if any(k.arg == "devices" for k in call.keywords):
        return True
    if builder.endswith("make_mesh"):
        return False
    positional_index = 2 if builder.endswith("hybrid_device_mesh") else 1
    return len(call.args) > positional_index
