"""AST checks on a team's own Python for the multi-controller habits that break under Pathways.

Every finding names ``file:line``; the files are read by ``acceptance.sources``. A line carrying
``# pathways-chaos: ignore`` is skipped (say why next to it). Names are resolved through the
file's imports, so ``import jax as j`` and ``from jax import process_index`` are caught as well
as ``jax.process_index()``.
"""

from __future__ import annotations

import ast
import dataclasses
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pathways_chaos.harness.acceptance.mesh_checks import mesh_findings
from pathways_chaos.harness.acceptance.process_index import (
    IndexRead,
    fixed_shard_counts,
    guards_the_controller,
    index_reads,
    index_uses,
    with_process_count,
)
from pathways_chaos.harness.acceptance.sources import SourceFile, load_sources
from pathways_chaos.harness.acceptance.table import CheckResult, Finding

CPU_COUNTS = frozenset(
    {"os.cpu_count", "os.process_cpu_count", "multiprocessing.cpu_count", "psutil.cpu_count"}
)
PRIVATE_ROOTS = frozenset({"orbax", "pathwaysutils"})
LOG_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "exception", "critical", "log"}
)


# -- the checks ----------------------------------------------------------------------------
def check_process_index(files: Sequence[SourceFile]) -> CheckResult:
    """``process_index()`` (or a TPU VM's ``TPU_WORKER_ID``) steering shards, writers or init
    (always 0 here), and a data shard count fixed at the old host count.

    Not findings: ``process_count()`` (1 here: a size divided by it stays global), an index
    passed with ``process_count()`` (shard 0 of 1 is the whole dataset), and a branch for
    process 0 or for the last process (``== process_count() - 1``), which runs once, on the one
    controller. An index held in a name is judged at each read of the name, by the same rules.
    """
    findings: list[Finding] = []
    guards = 0
    for f in files:
        found = fixed_shard_counts(f)
        for read in index_reads(f):
            if f.ignored(read.node):
                continue
            # A read the rules do not recognise (passed to an unknown function, returned,
            # stored in an attribute) is a finding, inline or through a name alike.
            for use, held in index_uses(f, read):
                if f.ignored(use) or _only_reported(f, use) or with_process_count(f, use):
                    continue
                if guards_the_controller(f, use) and (not read.env or read.has_default):
                    guards += 1
                    continue
                said = _index_message(f, read, held, use) + f.branch_note(use)
                found.append(Finding(f.where(use), said))
        found = list(dict.fromkeys(found))  # two reads of one name on a line: one finding
        findings += sorted(found, key=lambda x: int(x.where.rsplit(":", 1)[1]))
    result = _result(
        "process-index",
        "jax.process_index()/process_count() (or TPU_WORKER_ID) pick a data shard, a writer or "
        "initial state",
        "one controller sees the whole job: read the global dataset (grain NoSharding or "
        "ElasticIterator), write from the controller, seed from a constant",
        findings,
        files,
    )
    if guards and result.ok:
        said = f"{guards} branch{'es' if guards != 1 else ''} for process 0"
        result = dataclasses.replace(result, note=f"{result.note}; {said}: run on the controller")
    return result


def _index_message(f: SourceFile, read: IndexRead, held: str, use: ast.expr) -> str:
    """What the index does at ``use`` and what it is under Pathways, in one line."""
    what = f"{held} (= {read.label}, line {read.node.lineno})" if held else read.label
    if not read.env:
        return f"{what} {_process_purpose(f, use)}: under Pathways it is 0"
    return (
        f"{what} {_process_purpose(f, use)}: the Pathways controller's env has no per-host "
        f"{read.env}, so it raises KeyError or reads the default"
    )


def check_mesh_from_all_devices(files: Sequence[SourceFile]) -> CheckResult:
    """A mesh from ``jax.devices()`` in elastic code, or in a helper elastic code imports,
    still holds the slice that was lost (``mesh_checks``)."""
    return _result(
        "mesh-from-jax-devices",
        "elastic code builds meshes from jax.devices() instead of the active slices",
        "jax.devices() keeps the initial allocation for the client's lifetime: build the mesh "
        "from the elastic manager's active devices (active_slice_indices / slice_to_devices)",
        mesh_findings(files),
        files,
    )


def check_distributed_initialize(files: Sequence[SourceFile]) -> CheckResult:
    """``jax.distributed.initialize()`` starts one process of a multi-controller job."""
    findings = [
        Finding(
            f.where(call),
            "jax.distributed.initialize() joins a multi-controller job" + f.branch_note(call),
        )
        for f in files
        for call in f.calls_to({"jax.distributed.initialize"})
        if not f.ignored(call) and not _under_false_constant(f, call)
    ]
    return _result(
        "distributed-initialize",
        "jax.distributed.initialize() is called: under Pathways the one controller has no peer "
        "processes (it fails to find a coordinator, or waits for processes that never start)",
        "remove the call (pathwaysutils.initialize() sets up the Pathways backend); a legacy "
        "branch that never runs on Pathways can carry '# pathways-chaos: ignore' on its line",
        findings,
        files,
    )


def _under_false_constant(f: SourceFile, node: ast.AST) -> bool:
    """Inside ``if FLAG:`` where ``FLAG`` is a module-level ``False`` bound once (or ``if
    False:``): a branch no run takes."""
    for branch, in_body in f.branches(node):
        test = branch.test
        value = test.value if isinstance(test, ast.Constant) else None
        if isinstance(test, ast.Name):
            value = f.bool_constant(test.id)
        if in_body and value is False:
            return True
    return False


def check_cpu_count_workers(files: Sequence[SourceFile]) -> CheckResult:
    """``os.cpu_count()`` is the node's CPUs, shared with the Pathways services on it."""
    findings = []
    for f in files:
        for call in f.calls_to(CPU_COUNTS):
            if f.ignored(call) or _only_reported(f, call) or _capped(f, call):
                continue
            name = f.qualname(call.func)
            findings.append(
                Finding(
                    f.where(call),
                    f"{name}() sizes {_sized_thing(f, call)}: it counts the host VM's CPUs, "
                    "not the container's",
                )
            )
    return _result(
        "cpu-count-workers",
        "os.cpu_count() sizes loader workers",
        "set an explicit worker count within the container's CPU limit, or read the cgroup "
        "quota (pathways_chaos.harness.acceptance.static_checks.container_cpu_count)",
        findings,
        files,
    )


def check_private_imports(files: Sequence[SourceFile]) -> CheckResult:
    """``_src`` modules of orbax or pathwaysutils change without notice between releases."""
    findings = []
    for f in files:
        seen: set[int] = set()
        for node in ast.walk(f.tree):
            modules: list[str] = []
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Attribute):
                name = f.qualname(node)
                modules = [name] if name else []
            private = [m for m in modules if _is_private(m)]
            line = getattr(node, "lineno", 0)
            if private and line not in seen and not f.ignored(node):
                seen.add(line)
                findings.append(Finding(f.where(node), f"imports private {private[0]}"))
    findings.sort(key=lambda f: (f.where.rsplit(":", 1)[0], int(f.where.rsplit(":", 1)[1])))
    return _result(
        "private-src-import",
        "private _src modules of orbax or pathwaysutils are imported",
        "use the public API (orbax.checkpoint, orbax.checkpoint.v1, pathwaysutils.elastic); "
        "_src moves between releases that the Pathways image pins",
        findings,
        files,
    )


def check_logging_raise_exceptions(files: Sequence[SourceFile]) -> CheckResult:
    """With ``raiseExceptions`` False a slice-down error inside a log call is swallowed."""
    findings = []
    for f in files:
        last: tuple[ast.AST, bool] | None = None
        for node in sorted(_raise_exception_assignments(f), key=lambda n: n[0].lineno):
            last = node
        if last is not None and not last[1] and not f.ignored(last[0]):
            findings.append(
                Finding(
                    f.where(last[0]),
                    "logging.raiseExceptions is set False and never set back to True",
                )
            )
    return _result(
        "logging-raise-exceptions",
        "logging.raiseExceptions left False around elastic code",
        "set logging.raiseExceptions = True (pathwaysutils' elastic_retry advice) so a "
        "JaxRuntimeError raised while formatting a log record reaches the retry",
        findings,
        files,
    )


def check_elastic_retry_bound(files: Sequence[SourceFile]) -> CheckResult:
    """``elastic_retry`` retries forever by default; an INTERNAL error raised by a host
    callback counts as a slice down, so a bug there is retried for good."""
    findings = []
    for f in files:
        for call in _elastic_retry_calls(f):
            if f.ignored(call) or _retry_bound(call):
                continue
            findings.append(
                Finding(
                    f.where(call),
                    f"{ast.unparse(call)} has no retry bound (no retry_policy, no max_retries): "
                    f"write {_bounded(call)}",
                )
            )
    return _result(
        "elastic-retry-bound",
        "elastic_retry is given a retry bound (retry_policy or max_retries)",
        "pass retry_policy=manager.ElasticRetryLimit(max_attempts=10) (from "
        "pathwaysutils.elastic import manager), so an INTERNAL error from a host callback, "
        "which looks like a lost slice, ends the run instead of retrying forever",
        findings,
        files,
    )


def check_minimum_slice_count(files: Sequence[SourceFile], manifest: Any) -> CheckResult:
    """``elastic_retry(minimum_slice_count=N)`` waits for N slices before every attempt: with
    more than the JobSet runs, the job waits forever (or until its timeout) at its first one."""
    title = "elastic_retry's minimum_slice_count fits the slices the manifest runs"
    slices = int(getattr(manifest, "slice_count", 0) or 0)
    fix = (
        f"use minimum_slice_count between 1 and {slices} (the worker replicatedJob's replicas), "
        "or run the JobSet with as many slices as the loop waits for"
    )
    if slices < 1:
        return CheckResult(
            "minimum-slice-count",
            title,
            fix,
            skipped="a manifest with a worker replicatedJob (its replicas are the slices): pass "
            "it with --acceptance-manifest",
        )
    findings, seen, unread = [], [], []
    for f in files:
        for call in _elastic_retry_calls(f):
            if f.ignored(call):
                continue
            value = next((k.value for k in call.keywords if k.arg == "minimum_slice_count"), None)
            wanted = _int_constant(files, f, value)  # MIN_SLICES = 3, here or in configs.py
            if wanted is None:  # None (every slice), or computed at run time: the run shows it
                if value is not None and not _is_none(value):  # said in the note, not silent
                    unread.append(f"minimum_slice_count={ast.unparse(value)} ({f.where(call)})")
                continue
            seen.append(f"minimum_slice_count={wanted} ({f.where(call)})")
            if not 1 <= wanted <= slices:
                findings.append(
                    Finding(
                        f.where(call),
                        f"elastic_retry(minimum_slice_count={wanted}) waits for {wanted} slices; "
                        f"the manifest ({manifest.label}) runs {slices}",
                    )
                )
    note = (
        f"{'; '.join(seen)} within {slices} slices"
        if seen
        else f"no constant minimum_slice_count in {len(files)} file(s); {slices} slices"
    )
    if unread:
        note += f"; not read (computed at run time, the run shows it): {'; '.join(unread)}"
    return CheckResult("minimum-slice-count", title, fix, tuple(findings), note)


def _int_constant(files: Sequence[SourceFile], f: SourceFile, node: ast.AST | None) -> int | None:
    """An int literal or module constant of ``f``, or a module constant of another scanned file
    that ``f`` imports (``configs.MIN_SLICES`` after ``from mtx import configs``, ``import
    configs`` or ``from . import configs``; ``MIN_SLICES`` after ``from configs import ...``)."""
    value = f.int_constant(node)
    dotted = _dotted(f, node) if value is None and node is not None else None
    if not dotted or len(dotted) < 2:
        return value
    *module, name = dotted
    ends = [(*module[:-1], f"{module[-1]}.py"), (*module, "__init__.py")]
    owners = [g for g in files if any(g.path.resolve().parts[-len(e) :] == e for e in ends)]
    values = {g.int_constant(ast.Name(id=name, ctx=ast.Load())) for g in owners}
    return values.pop() if len(values) == 1 else None  # none, or modules that disagree


def _dotted(f: SourceFile, node: ast.AST) -> tuple[str, ...] | None:
    """What ``node`` names through the file's imports, as module path parts and a name: an
    absolute import by its dotted name, a relative one from the file's own folder."""
    if isinstance(node, ast.Attribute):
        base = _dotted(f, node.value)
        return (*base, node.attr) if base else None
    if not isinstance(node, ast.Name):
        return None
    if node.id in f.aliases:
        return tuple(f.aliases[node.id].split("."))
    parents = f.path.resolve().parents
    for imp in ast.walk(f.tree):
        if not isinstance(imp, ast.ImportFrom) or not 0 < imp.level <= len(parents):
            continue
        module = imp.module.split(".") if imp.module else []
        for a in imp.names:
            if (a.asname or a.name) == node.id:
                return (*parents[imp.level - 1].parts, *module, a.name)
    return None


STATIC_CHECKS: dict[str, Callable[[Sequence[SourceFile]], CheckResult]] = {
    "process-index": check_process_index,
    "distributed-initialize": check_distributed_initialize,
    "mesh-from-jax-devices": check_mesh_from_all_devices,
    "cpu-count-workers": check_cpu_count_workers,
    "private-src-import": check_private_imports,
    "logging-raise-exceptions": check_logging_raise_exceptions,
    "elastic-retry-bound": check_elastic_retry_bound,
}


def run_static_checks(paths: Sequence[str | Path]) -> list[CheckResult]:
    files = load_sources(paths)
    return [check(files) for check in STATIC_CHECKS.values()]


def container_cpu_count(cgroup_root: str | Path = "/sys/fs/cgroup") -> int:
    """CPUs the container may use: the cgroup v2 (or v1) quota, else the affinity mask."""
    root = Path(cgroup_root)
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        if quota != "max":
            return max(1, min(affinity, int(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        if quota_us > 0:
            return max(1, min(affinity, quota_us // period_us))
    except (OSError, ValueError):
        pass
    return max(1, affinity)


# -- helpers -------------------------------------------------------------------------------
def _result(
    check: str, title: str, fix: str, findings: list[Finding], files: Sequence[SourceFile]
) -> CheckResult:
    note = f"{len(files)} file{'s' if len(files) != 1 else ''} scanned, nothing found"
    return CheckResult(check, title, fix, tuple(findings), note)


def _is_reporting_call(f: SourceFile, node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name) and func.id == "print":
        return True
    if isinstance(func, ast.Attribute) and func.attr in LOG_METHODS:
        return True
    name = f.qualname(func) or ""
    return name.startswith(("logging.", "absl.logging."))


def _only_reported(f: SourceFile, value: ast.AST) -> bool:
    """The value is only printed or logged: harmless."""
    for node in f.ancestors(value):
        if isinstance(node, ast.JoinedStr) or _is_reporting_call(f, node):
            return True
        if isinstance(node, ast.stmt):
            return False
    return False


def _words(node: ast.AST) -> str:
    """Lower-case names around a node: the call, keyword and target names that say its role."""
    if isinstance(node, ast.Call):
        func = node.func
        return (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")).lower()
    if isinstance(node, ast.keyword):
        return (node.arg or "").lower()
    if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return " ".join(ast.unparse(t) for t in targets).lower()
    return ""


def _process_purpose(f: SourceFile, use: ast.AST) -> str:
    node: ast.AST = use
    for parent in f.ancestors(use):
        if isinstance(parent, ast.If | ast.IfExp | ast.While) and node is parent.test:
            return "chooses which process acts (a writer, a one-off task)"
        if isinstance(parent, ast.Subscript) and node is parent.slice:
            return "picks a data shard"
        words = _words(parent)
        if any(w in words for w in ("shard", "split", "partition", "subset")):
            return "picks a data shard"
        if any(w in words for w in ("seed", "key", "rng", "init")):
            return "initialises state"
        if any(w in words for w in ("write", "save", "checkpoint", "writer")):
            return "chooses a writer"
        if isinstance(parent, ast.stmt):
            break
        node = parent
    return "steers the program"


def _capped(f: SourceFile, call: ast.Call) -> bool:
    """``min(4, os.cpu_count() or 1)``: at most a constant, whatever the host counts."""
    node: ast.AST = call
    parent = f.parents.get(node)
    if isinstance(parent, ast.BoolOp):  # os.cpu_count() or 1
        node, parent = parent, f.parents.get(parent)
    if not (isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name)):
        return False
    others = [a for a in parent.args if a is not node]
    return parent.func.id == "min" and any(f.int_constant(a) is not None for a in others)


def _sized_thing(f: SourceFile, call: ast.Call) -> str:
    for parent in f.ancestors(call):
        words = _words(parent)
        if words and not isinstance(parent, ast.Call):
            return words.split()[0]
        if isinstance(parent, ast.Call) and f.qualname(parent.func) not in (None, "max", "min"):
            return f"{words}()" if words else "a pool"
        if isinstance(parent, ast.stmt):
            break
    return "a worker pool"


def _elastic_retry_calls(f: SourceFile) -> Iterator[ast.Call]:
    """Calls of ``<manager>.elastic_retry(...)`` (a method: any receiver) or of a name
    imported as ``elastic_retry``."""
    calls = []
    for node in ast.walk(f.tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        method = isinstance(func, ast.Attribute) and func.attr == "elastic_retry"
        imported = isinstance(func, ast.Name) and (f.qualname(func) or "").endswith(
            ".elastic_retry"
        )
        if method or imported:
            calls.append(node)
    yield from sorted(calls, key=lambda n: (n.lineno, n.col_offset))


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _retry_bound(call: ast.Call) -> bool:
    """``max_retries`` (also the first positional argument) or ``retry_policy`` given, and not
    a literal None; ``**kwargs`` may carry one, so it counts as given."""
    if call.args and not isinstance(call.args[0], ast.Starred):
        return not _is_none(call.args[0])
    if any(isinstance(a, ast.Starred) for a in call.args):
        return True
    for k in call.keywords:
        if k.arg is None or (k.arg in ("max_retries", "retry_policy") and not _is_none(k.value)):
            return True
    return False


def _bounded(call: ast.Call) -> str:
    """The user's own call with the guide's retry policy added."""
    bounded = ast.Call(
        func=call.func,
        args=[],
        keywords=[
            *(k for k in call.keywords if k.arg not in ("max_retries", "retry_policy")),
            ast.keyword(
                arg="retry_policy",
                value=ast.parse("manager.ElasticRetryLimit(max_attempts=10)", mode="eval").body,
            ),
        ],
    )
    return ast.unparse(bounded)


def _is_private(module: str) -> bool:
    parts = module.split(".")
    return parts[0] in PRIVATE_ROOTS and "_src" in parts


def _raise_exception_assignments(f: SourceFile) -> Iterator[tuple[ast.stmt, bool]]:
    for node in ast.walk(f.tree):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        else:
            continue
        if any(f.qualname(t) == "logging.raiseExceptions" for t in targets):
            value = node.value
            truthy = not (isinstance(value, ast.Constant) and not value.value)
            yield node, truthy
