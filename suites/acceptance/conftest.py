"""Options and fixtures of the acceptance suite, and its pass/fail table.

``pytest suites/acceptance --trainer=MODULE:NAME --source=PATH --manifest=PATH`` checks a
team's port. Collected by a plain ``pytest`` (these options then keep their defaults) it
checks the reference adapter and the good sample port, so the repository stays green.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pathways_chaos.harness.acceptance.adapter import TrainingAdapter
    from pathways_chaos.harness.acceptance.manifest_checks import Manifest
    from pathways_chaos.harness.acceptance.runtime import RuntimeRuns
    from pathways_chaos.harness.acceptance.static_checks import SourceFile
    from pathways_chaos.harness.acceptance.table import CheckResult

SAMPLES = Path(__file__).parent / "samples"
DEFAULT_TRAINER = "pathways_chaos.harness.acceptance.adapter:reference_adapter"
DEFAULT_SOURCE = SAMPLES / "good_port"
DEFAULT_MANIFEST = SAMPLES / "good_port" / "jobset.yaml"

ROWS = pytest.StashKey[list["CheckResult"]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pathways-chaos acceptance", "pre-migration acceptance checks")
    group.addoption(
        "--trainer",
        dest="acceptance_trainer",
        default=None,
        metavar="MODULE:NAME",
        help=f"the TrainingAdapter to run (MODULE:NAME or FILE.py:NAME; default {DEFAULT_TRAINER})",
    )
    group.addoption(
        "--source",
        dest="acceptance_source",
        action="append",
        default=None,
        metavar="PATH",
        help="Python file or folder the static checks read (repeatable; default the good sample)",
    )
    group.addoption(
        "--manifest",
        dest="acceptance_manifest",
        default=None,
        metavar="PATH",
        help="JobSet YAML (file or folder, CheckpointConfiguration included) the manifest "
        "checks read (default the good sample)",
    )
    group.addoption(
        "--params",
        dest="acceptance_params",
        default=None,
        help="the full model's parameter count for ramdisk sizing, e.g. 8e9 (default: the "
        "adapter's params, else its initial state's size)",
    )
    group.addoption(
        "--ramdisk-buffer",
        dest="acceptance_ramdisk_buffer",
        default="0.15",
        help="safety buffer on the ramdisk estimate (default 0.15)",
    )


def _option(config: pytest.Config, name: str) -> Any:
    # Collected by a plain `pytest`, this conftest registers its options late: defaults apply.
    return config.getoption(name, default=None)


def _usage(call: Callable[[], Any]) -> Any:
    """Bad input ends the test with the one-line error, not a traceback."""
    from pathways_chaos.harness.errors import ChaosConfigError

    try:
        return call()
    except ChaosConfigError as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture(scope="session")
def acceptance_adapter(pytestconfig: pytest.Config) -> TrainingAdapter:
    from pathways_chaos.harness.acceptance.adapter import load_adapter

    spec = _option(pytestconfig, "acceptance_trainer") or DEFAULT_TRAINER
    adapter: TrainingAdapter = _usage(lambda: load_adapter(spec))
    return adapter


@pytest.fixture(scope="session")
def acceptance_sources(pytestconfig: pytest.Config) -> list[SourceFile]:
    from pathways_chaos.harness.acceptance.static_checks import load_sources

    paths = _option(pytestconfig, "acceptance_source") or [DEFAULT_SOURCE]
    sources: list[SourceFile] = _usage(lambda: load_sources(paths))
    return sources


@pytest.fixture(scope="session")
def acceptance_manifest(pytestconfig: pytest.Config) -> Manifest:
    from pathways_chaos.harness.acceptance.manifest_checks import load_manifest

    path = _option(pytestconfig, "acceptance_manifest") or DEFAULT_MANIFEST
    manifest: Manifest = _usage(lambda: load_manifest(path))
    return manifest


@pytest.fixture(scope="session")
def acceptance_params(
    pytestconfig: pytest.Config, acceptance_adapter: TrainingAdapter
) -> tuple[float, str]:
    """The parameter count for ramdisk sizing, and where it came from."""
    from pathways_chaos.harness.acceptance.ramdisk import parse_count

    given = _option(pytestconfig, "acceptance_params")
    if given:
        return _usage(lambda: parse_count(given)), "from --params"
    if acceptance_adapter.params:
        return acceptance_adapter.params, f"declared by adapter {acceptance_adapter.name}"
    import jax

    state = jax.eval_shape(acceptance_adapter.init_state)
    count = sum(int(leaf.size) for leaf in jax.tree_util.tree_leaves(state))
    return float(count), f"counted in adapter {acceptance_adapter.name}'s initial state"


@pytest.fixture(scope="session")
def ramdisk_buffer(pytestconfig: pytest.Config) -> float:
    from pathways_chaos.harness.acceptance.ramdisk import parse_buffer

    text = _option(pytestconfig, "acceptance_ramdisk_buffer") or "0.15"
    buffer: float = _usage(lambda: parse_buffer(str(text)))
    return buffer


@pytest.fixture(scope="session")
def runtime_runs(
    pytestconfig: pytest.Config,
    acceptance_adapter: TrainingAdapter,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RuntimeRuns]:
    from pathways_chaos.harness.acceptance.runtime import RuntimeRuns
    from pathways_chaos.harness.pytest_plugin.plugin import fake_topology

    runs = _usage(
        lambda: RuntimeRuns(
            acceptance_adapter,
            topology=fake_topology(pytestconfig),
            workdir=tmp_path_factory.mktemp("acceptance"),
        )
    )
    yield runs
    runs.close()


@pytest.fixture
def check_row(request: pytest.FixtureRequest) -> Callable[[CheckResult], None]:
    """Records a check's row for the table and fails the test with its findings and fix."""

    def record(result: CheckResult) -> None:
        request.config.stash.setdefault(ROWS, []).append(result)
        request.node.user_properties += [
            ("acceptance_check", result.check),
            ("acceptance_status", result.status),
            ("acceptance_reason", result.reason),
            ("acceptance_fix", "" if result.ok else result.fix),
        ]
        if not result.ok:
            pytest.fail(result.failure_message(), pytrace=False)

    return record


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    rows = config.stash.get(ROWS, [])
    if not rows:
        return
    from pathways_chaos.harness.acceptance.table import render

    order = {name: i for i, name in enumerate(check_order())}
    rows = sorted(rows, key=lambda r: order.get(r.check, len(order)))
    terminalreporter.write_sep("=", "pathways-chaos acceptance checks")
    sources = _option(config, "acceptance_source") or [DEFAULT_SOURCE]
    terminalreporter.write_line(
        f"trainer {_option(config, 'acceptance_trainer') or DEFAULT_TRAINER}; "
        f"source {', '.join(map(_shown, sources))}; "
        f"manifest {_shown(_option(config, 'acceptance_manifest') or DEFAULT_MANIFEST)}"
    )
    for line in render(rows, width=150).splitlines():
        terminalreporter.write_line(line)


def check_order() -> list[str]:
    """Static, then manifest, then runtime: the order a team fixes them in."""
    from pathways_chaos.harness.acceptance.manifest_checks import MANIFEST_CHECKS
    from pathways_chaos.harness.acceptance.runtime import RUNTIME_CHECKS
    from pathways_chaos.harness.acceptance.static_checks import STATIC_CHECKS

    return [*STATIC_CHECKS, *MANIFEST_CHECKS, "ramdisk-size", *RUNTIME_CHECKS]


def _shown(path: str | Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
