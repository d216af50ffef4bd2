"""Fixtures of the acceptance suite, the row each check records, and the table after the run.

``pytest suites/acceptance --acceptance-source=PATH --acceptance-manifest=PATH
--acceptance-adapter=MODULE:NAME`` checks a team's port. Only what is given is checked: a check
whose input is missing records a SKIP row saying what to pass (there is no fallback to the
bundled samples), so a plain ``pytest`` of this repository skips every row. The options are
registered by the pathways-chaos plugin (``harness/acceptance/options.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pathways_chaos.harness.acceptance.adapter_child import AdapterFacts
    from pathways_chaos.harness.acceptance.manifest import Manifest
    from pathways_chaos.harness.acceptance.sources import SourceFile
    from pathways_chaos.harness.acceptance.table import CheckResult

HERE = Path(__file__).parent
GROUP_OF_MODULE = {
    "test_static_checks": "static",
    "test_manifest_checks": "manifest",
    "test_runtime_checks": "runtime",
}
ROWS = pytest.StashKey[list["CheckResult"]]()
ORDER = pytest.StashKey[dict[str, int]]()
LOADED = pytest.StashKey[dict[str, Any]]()
#: The one usage line a bad input ended the session with: no table, no report after it.
USAGE_ERROR = pytest.StashKey[str]()


@dataclasses.dataclass(frozen=True)
class Given[T]:
    """An input of the checks: its value, or (``value`` None) what to pass to give it."""

    value: T | None
    missing: str = ""


NO_SOURCE = "pass --acceptance-source PATH (your training code's folder or file)"
NO_MANIFEST = "pass --acceptance-manifest PATH (your JobSet YAML, file or folder)"
NO_ADAPTER = "pass --acceptance-adapter MODULE:NAME (your TrainingAdapter)"
NO_RUNTIME = (
    "pass --chaos-loop MODULE:FUNC (your own elastic loop) or --acceptance-adapter MODULE:NAME"
)


def _option(config: pytest.Config, name: str) -> Any:
    return config.getoption(name, default=None)


def _usage[T](call: Callable[[], T]) -> T:
    """Bad input ends the test with the one-line error, not a traceback."""
    from pathways_chaos.harness.errors import ChaosConfigError

    try:
        return call()
    except ChaosConfigError as error:
        said = str(error)
    pytest.fail(said, pytrace=False)  # outside the except: one line, not two chained copies


def _load_adapter(config: pytest.Config, mktemp: Callable[[str], Path]) -> Given[AdapterFacts]:
    """The team's adapter as its own child process found it (loaded there, never here), with
    its plain one-device run."""
    spec = _option(config, "acceptance_adapter")
    if not spec:
        return Given(None, NO_ADAPTER)
    from pathways_chaos.harness.acceptance.adapter_child import describe_adapter

    return Given(describe_adapter(str(spec), mktemp("acceptance-adapter")))


def _load_sources(config: pytest.Config, mktemp: Callable[[str], Path]) -> Given[list[SourceFile]]:
    paths = _option(config, "acceptance_source")
    if not paths:
        return Given(None, NO_SOURCE)
    from pathways_chaos.harness.acceptance.static_checks import load_sources

    return Given(load_sources(paths))


def _load_manifest(config: pytest.Config, mktemp: Callable[[str], Path]) -> Given[Manifest]:
    paths = _option(config, "acceptance_manifest")
    if not paths:
        return Given(None, NO_MANIFEST)
    from pathways_chaos.harness.acceptance.manifest_checks import load_manifest

    return Given(load_manifest(paths))


def _load_buffer(config: pytest.Config, mktemp: Callable[[str], Path]) -> float:
    from pathways_chaos.harness.acceptance.ramdisk import parse_buffer

    text = _option(config, "acceptance_ramdisk_buffer") or "0.15"
    return parse_buffer(str(text), "--acceptance-ramdisk-buffer")


#: Each input the fixture of that name gives, read once: before the first test by
#: ``_load_inputs`` (bad input is one usage line, exit 4), else by the fixture itself.
LOADERS: dict[str, Callable[[pytest.Config, Callable[[str], Path]], Any]] = {
    "acceptance_sources": _load_sources,
    "acceptance_manifest": _load_manifest,
    "ramdisk_buffer": _load_buffer,
    "acceptance_adapter": _load_adapter,
}


def _loaded(config: pytest.Config, name: str, factory: pytest.TempPathFactory) -> Any:
    """``name``'s input as ``_load_inputs`` read it, or read now (a pytest run that skipped
    that hook): bad input then fails the test in one line."""
    loaded = config.stash.setdefault(LOADED, {})
    if name not in loaded:
        loaded[name] = _usage(lambda: LOADERS[name](config, factory.mktemp))
    return loaded[name]


def _load_inputs(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Reads every input the selected rows need, once, before the first test: bad input (a
    missing path, a Helm template, a syntax error, an adapter that does not load) is then one
    usage line and exit 4, not one identical setup ERROR per row."""
    if config.option.collectonly:
        return
    from pathways_chaos.harness.errors import ChaosConfigError

    needed = {name for item in items if _is_ours(item) for name in _fixtures(item)}
    factory: pytest.TempPathFactory | None = getattr(config, "_tmp_path_factory", None)
    loaded = config.stash.setdefault(LOADED, {})
    for name, load in LOADERS.items():
        if name not in needed or name in loaded or factory is None:
            continue
        try:
            loaded[name] = load(config, factory.mktemp)
        except ChaosConfigError as error:
            said = str(error)
        else:
            continue
        config.stash[USAGE_ERROR] = said
        raise pytest.UsageError(f"pathways-chaos: {said}")


def _fixtures(item: pytest.Item) -> list[str]:
    return list(getattr(item, "fixturenames", ()))


@pytest.fixture(scope="session")
def acceptance_adapter(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Given[AdapterFacts]:
    return _loaded(pytestconfig, "acceptance_adapter", tmp_path_factory)


@pytest.fixture(scope="session")
def acceptance_sources(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Given[list[SourceFile]]:
    return _loaded(pytestconfig, "acceptance_sources", tmp_path_factory)


@pytest.fixture(scope="session")
def acceptance_manifest(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Given[Manifest]:
    return _loaded(pytestconfig, "acceptance_manifest", tmp_path_factory)


@pytest.fixture(scope="session")
def acceptance_params(
    pytestconfig: pytest.Config, acceptance_adapter: Given[AdapterFacts]
) -> tuple[float | None, str]:
    """The parameter count for ramdisk sizing and where it came from (None: not given)."""
    from pathways_chaos.harness.acceptance.ramdisk import parse_count

    given = _option(pytestconfig, "acceptance_params")
    if given:
        return _usage(lambda: parse_count(given)), "from --acceptance-params"
    adapter = acceptance_adapter.value
    if adapter is None:
        return None, ""
    if adapter.params:
        return adapter.params, f"declared by adapter {adapter.name}"
    if adapter.counted_params is None:  # its init_state raised: the runtime rows say where
        return None, ""
    return adapter.counted_params, f"counted in adapter {adapter.name}'s initial state"


@pytest.fixture(scope="session")
def ramdisk_buffer(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> float:
    return _loaded(pytestconfig, "ramdisk_buffer", tmp_path_factory)


@pytest.fixture(scope="session")
def runtime_runs(
    pytestconfig: pytest.Config,
    acceptance_adapter: Given[AdapterFacts],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Given[Any]]:
    """The runs the runtime rows read: of the team's own loop (``--chaos-loop``), with the
    adapter as an optional extra for what the loop cannot show; else of the adapter."""
    from pathways_chaos.fixtures.cluster import fake_topology
    from pathways_chaos.harness.acceptance.runtime import RuntimeRuns

    adapter = acceptance_adapter.value
    loop_spec = _option(pytestconfig, "chaos_loop")
    runs = None
    if adapter is not None:
        runs = _usage(
            lambda: RuntimeRuns(
                adapter,
                topology=fake_topology(pytestconfig),
                workdir=tmp_path_factory.mktemp("acceptance"),
            )
        )
    if loop_spec:
        from pathways_chaos.harness.acceptance.loop_runtime import LoopRuns
        from pathways_chaos.harness.episodes.supervisor import check_loop

        problem = check_loop(str(loop_spec))  # loaded in a child, never in this process
        if problem is not None:
            pytest.fail(f"pathways-chaos: {problem}", pytrace=False)
        loop_runs = _usage(
            lambda: LoopRuns(
                str(loop_spec),
                topology=fake_topology(pytestconfig),
                workdir=tmp_path_factory.mktemp("acceptance-loop"),
                adapter_runs=runs,
            )
        )
        yield Given(loop_runs)
        loop_runs.close()
    elif runs is not None:
        yield Given(runs)
    else:
        yield Given(None, NO_RUNTIME)
    if runs is not None:
        runs.close()


def _row_of_bad_input(check: str, judge: Callable[[], CheckResult]) -> CheckResult:
    """``judge()``; input it cannot read (a size that is no Kubernetes quantity) is a FAIL row
    saying so: the table and the report keep the row, a gate reading them sees the failure."""
    from pathways_chaos.harness.acceptance.table import CheckResult, Finding
    from pathways_chaos.harness.errors import ChaosConfigError

    try:
        return judge()
    except ChaosConfigError as error:
        said = str(error)
    fix = "correct the input as the finding says, then run the check again"
    return CheckResult(check, "its input can be read", fix, (Finding("input", said),))


@pytest.fixture
def check_row(request: pytest.FixtureRequest) -> Callable[..., None]:
    """``check_row(check, run, *needs)``: runs ``run(*values)`` when every input is given, else
    records a SKIP row naming what to pass; records the row for the table and ends the test
    as the row says (FAIL fails with the findings and the fix; SKIP and NOT JUDGED skip)."""
    from pathways_chaos.harness.acceptance.table import FAIL, PASS, CheckResult, judge_row

    group = GROUP_OF_MODULE.get(request.node.module.__name__.rsplit(".", 1)[-1], "")

    def record(check: str, run: Callable[..., CheckResult], *needs: Given[Any]) -> None:
        missing = [n.missing for n in needs if n.value is None]
        if missing:
            result = CheckResult(check, "", "", skipped="; ".join(dict.fromkeys(missing)))
        else:  # a toolkit exception is NOT JUDGED, never the user's FAIL
            result = _row_of_bad_input(
                check, lambda: judge_row(check, run, *(n.value for n in needs))
            )
        result = dataclasses.replace(result, group=group)
        request.config.stash.setdefault(ROWS, []).append(result)
        request.node.user_properties += [
            ("acceptance_check", result.check),
            ("acceptance_group", group),
            ("acceptance_status", result.status),
            ("acceptance_reason", result.reason),
            ("acceptance_fix", result.fix if result.status == FAIL else ""),
        ]
        if result.status == FAIL:
            pytest.fail(result.failure_message(), pytrace=False)
        if result.status != PASS:
            pytest.skip(f"{result.status}: {result.reason}")

    return record


# -- selection -----------------------------------------------------------------------------
def _is_ours(item: pytest.Item) -> bool:
    return HERE in Path(str(item.path)).parents


def _check_of(item: pytest.Item) -> tuple[str, str]:
    group = GROUP_OF_MODULE.get(Path(str(item.path)).stem, "")
    callspec = getattr(item, "callspec", None)
    return group, str(callspec.params.get("check", item.name)) if callspec else item.name


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from pathways_chaos.harness.acceptance.options import GROUPS, parse_checks

    ours = [i for i in items if _is_ours(i)]
    config.stash[ORDER] = {
        _check_of(i)[1]: (GROUPS.index(g) if g in GROUPS else 9) * 1000 + n
        for n, i in enumerate(ours)
        for g in [_check_of(i)[0]]
    }
    wanted = parse_checks(_option(config, "acceptance_checks"))
    if not wanted:
        _load_inputs(config, items)
        return
    names = {_check_of(i)[1] for i in ours}
    unknown = [w for w in wanted if w not in GROUPS and w not in names]
    if unknown:
        config.stash[USAGE_ERROR] = said = (
            f"--acceptance-checks: unknown {', '.join(unknown)}: use the groups "
            f"{', '.join(GROUPS)} or check names ({', '.join(sorted(names))})"
        )
        raise pytest.UsageError(f"pathways-chaos: {said}")
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        group, name = _check_of(item)
        selected = not _is_ours(item) or group in wanted or name in wanted
        (keep if selected else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    _load_inputs(config, items)


# -- the table -----------------------------------------------------------------------------
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    rows = config.stash.get(ROWS, [])
    report = _option(config, "acceptance_report")
    if (not rows and not report) or USAGE_ERROR in config.stash:
        return  # a bad input's one line says it all; an empty report would read as green
    from pathways_chaos.harness.acceptance.table import SKIP, render, write_report

    order = config.stash.get(ORDER, {})
    rows = sorted(rows, key=lambda r: order.get(r.check, len(order) * 1000))
    sources = ", ".join(map(_shown, _option(config, "acceptance_source") or []))
    manifests = ", ".join(map(_shown, _option(config, "acceptance_manifest") or []))
    loop = _option(config, "chaos_loop")
    header = (
        (f"loop {loop}; " if loop else "")
        + f"adapter {_option(config, 'acceptance_adapter') or 'not given'}; "
        f"source {sources or 'not given'}; manifest {manifests or 'not given'}"
    )
    terminalreporter.write_sep("=", "pathways-chaos acceptance checks")
    if (
        not report
        and all(r.status == SKIP for r in rows)
        and not any(
            _option(config, o)
            for o in (
                "acceptance_adapter",
                "acceptance_source",
                "acceptance_manifest",
                "chaos_loop",
            )
        )
    ):
        terminalreporter.write_line(
            f"nothing given, {len(rows)} rows skipped: pass --acceptance-source, "
            "--acceptance-manifest and/or --acceptance-adapter"
        )
        return
    terminalreporter.write_line(header)
    width = max(100, int(getattr(getattr(terminalreporter, "_tw", None), "fullwidth", 120)))
    for line in render(rows, width=width).splitlines():
        terminalreporter.write_line(line)
    if report:
        path = write_report(rows, report, header)
        terminalreporter.write_line(f"acceptance report: {path}")


def _shown(path: str | Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
