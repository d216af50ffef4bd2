"""The pytest11 entry point: options, markers, and the fixture modules.

Inert until used (see ``activation``): a session that asks for nothing of ours imports nothing
heavy, sets no environment variable and leaves JAX alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pathways_chaos.harness.pytest_plugin import option_checks

if TYPE_CHECKING:
    from pathways_chaos.harness.engine.deadline import Deadline

FIXTURE_MODULES = (
    "pathways_chaos.fixtures.cluster",
    "pathways_chaos.fixtures.chaos",
    "pathways_chaos.fixtures.control_plane",
    "pathways_chaos.fixtures.workload",
    "pathways_chaos.fixtures.mtc",
)

MARKERS = (
    "chaos: a chaos episode (fault schedule + oracle); the main job runs `pytest -m chaos`",
    "kube: talks to a real kube-apiserver (the local control plane unless --cluster)",
    "slow: longer than a few seconds on 2 cores",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    # One piece (over 80 lines): the option table pytest prints for --help, in its order.
    group = parser.getgroup("pathways-chaos", "pathways-chaos: elastic training under failure")
    group.addoption(
        "--cluster",
        default=None,
        metavar="CONTEXT",
        help="run against a Kubernetes cluster: a kube context, or KUBECONFIG_PATH:CONTEXT",
    )
    group.addoption("--namespace", default=None, help="with --cluster: the JobSet's namespace")
    group.addoption("--jobset", default=None, help="with --cluster: the target JobSet's name")
    group.addoption(
        "--pathways-proxy",
        default=None,
        metavar="ADDRESS",
        help="with --cluster: the Pathways proxy (JAX backend target); without it the JAX side "
        "is the fake cluster, bridged to the JobSet's Pods",
    )
    group.addoption(
        "--fake-slices",
        default=None,
        help="slices of the in-process fake cluster (default 4, env PATHWAYS_CHAOS_SLICES)",
    )
    group.addoption(
        "--fake-devices-per-slice",
        default=None,
        help="CPU devices per fake slice (default 2, env PATHWAYS_CHAOS_DEVICES_PER_SLICE)",
    )
    group.addoption(
        "--chaos-clock",
        default="fake",
        metavar="{fake,real}",
        help="fake: pathwaysutils' waits and polls cost no real time (default); real: they do",
    )
    group.addoption(
        "--chaos-deadline",
        default=None,
        metavar="FAKE_S",
        help="episode-clock seconds an episode may take before it ends with what it waited for "
        "(default 3600; 'off' for none)",
    )
    group.addoption(
        "--chaos-wall-deadline",
        default=None,
        metavar="S",
        help="wall-clock seconds an episode may take, for code that spins without the clock "
        "(default 600; 'off' for none)",
    )
    group.addoption(
        "--chaos-require-judged",
        action="store_true",
        default=False,
        help="a loop test whose central judges (exactly-once, final-state) could not judge "
        "fails instead of being skipped as not judged",
    )
    group.addoption(
        "--chaos-memory-limit",
        default=None,
        metavar="SIZE",
        help="memory one episode's loop process may use before it is ended and named "
        "(default 4GiB)",
    )
    group.addoption(
        "--chaos-log-dir",
        default=None,
        help="write each episode's JSONL event log into this folder",
    )
    group.addoption(
        "--chaos-trainer",
        default="pathways_chaos.harness.reference.trainer:ReferenceTrainer",
        help="MODULE:CLASS of the trainer the chaos suite runs (a ReferenceTrainer subclass)",
    )
    group.addoption(
        "--chaos-loop",
        default=None,
        metavar="MODULE:FUNC",
        help="your own elastic loop (MODULE:FUNC or FILE.py:FUNC), run unchanged by the chaos "
        "suite's loop scenarios, the property suites' loop search and the acceptance runtime "
        "rows (default: the sample loop)",
    )
    group.addoption(
        "--chaos-report",
        default=None,
        metavar="PATH",
        help="write an HTML report (timeline per test, goodput, badput buckets) to PATH",
    )
    group.addoption(
        "--chaos-progress",
        default="auto",
        metavar="{auto,on,off}",
        help="a live line during episodes (auto: on a terminal, never under -q)",
    )
    group.addoption(
        "--chaos-progress-every",
        default=10,
        help="steps between progress lines (default 10)",
    )
    group.addoption(
        "--chaos-profile",
        default=None,
        metavar="{ci,dev,nightly}",
        help="hypothesis profile of the property suites: ci (default), dev, nightly "
        "(env PATHWAYS_CHAOS_PROFILE)",
    )
    group.addoption(
        "--chaos-budget",
        default=None,
        metavar="SECONDS",
        help="with --chaos-loop: seconds of episodes the property suites' loop search may spend "
        "(default 120 under the ci profile, none under dev and nightly)",
    )
    group.addoption(
        "--chaos-search-report",
        default=None,
        metavar="PATH",
        help="with --chaos-loop: write what the loop search covered as JSON to PATH (default: "
        "loop-search.json in --chaos-log-dir, else in pytest's cache folder)",
    )
    group.addoption(
        "--chaos-arm",
        action="store_true",
        default=False,
        help="against a real cluster, really inject faults (otherwise a dry run that prints them)",
    )
    group.addoption(
        "--chaos-allow-namespace",
        action="append",
        default=None,
        metavar="NAMESPACE",
        help="with --cluster: a namespace faults may touch (repeatable; default: --namespace)",
    )
    group.addoption(
        "--chaos-journal-dir",
        default=None,
        metavar="DIR",
        help="where armed sessions write rollback journals (default $PATHWAYS_CHAOS_JOURNAL_DIR "
        "or $XDG_STATE_HOME/pathways-chaos/journals)",
    )
    group.addoption(
        "--chaos-lease-seconds",
        default=30,
        help="with --cluster --chaos-arm: the target Lease's duration; a dead holder's lease "
        "expires after it (default 30)",
    )
    # The acceptance suite's options live here, not in its conftest, so that they exist when
    # the suite runs from an installed wheel (pytest --pyargs pathways_chaos.suites.acceptance).
    from pathways_chaos.harness.acceptance.options import add_acceptance_options

    add_acceptance_options(group)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pathways_chaos.harness.pytest_plugin import hooks

    pluginmanager.add_hookspecs(hooks)


def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    option_checks.check_options(config)  # bad values: one line, exit 4, before anything runs
    _set_deadline(config)
    _set_memory_limit(config)
    for name in FIXTURE_MODULES:
        if not config.pluginmanager.has_plugin(name):
            config.pluginmanager.import_plugin(name)
    from pathways_chaos.harness.pytest_plugin import activation

    if activation.options_ask_for_devices(config) or config.getoption("cluster"):
        activation.activate(config)
    report_path = config.getoption("chaos_report")
    if report_path:
        from pathways_chaos.harness.reports.report_plugin import ChaosReportPlugin

        config.pluginmanager.register(ChaosReportPlugin(report_path), "pathways-chaos-report")
    if config.getoption("cluster"):
        from pathways_chaos.harness.kube.pod_logs import PodLogCollector

        config.pluginmanager.register(PodLogCollector(), "pathways-chaos-pod-logs")


_PREVIOUS_DEADLINE: pytest.StashKey[Deadline] = pytest.StashKey()


def _set_deadline(config: pytest.Config) -> None:
    """Every episode of the session gets these limits (harness.engine.deadline; stdlib only)."""
    fake, wall = config.getoption("chaos_deadline"), config.getoption("chaos_wall_deadline")
    if fake is None and wall is None:
        return
    from pathways_chaos.harness.engine import deadline

    limits = deadline.Deadline(
        deadline.DEFAULT_FAKE_S
        if fake is None
        else deadline.parse_seconds(fake, "--chaos-deadline"),
        deadline.DEFAULT_WALL_S
        if wall is None
        else deadline.parse_seconds(wall, "--chaos-wall-deadline"),
    )
    config.stash[_PREVIOUS_DEADLINE] = deadline.set_default_deadline(limits)


_PREVIOUS_LIMITS: pytest.StashKey[Any] = pytest.StashKey()


def _set_memory_limit(config: pytest.Config) -> None:
    raw = config.getoption("chaos_memory_limit")
    if raw is None:
        return
    import dataclasses

    from pathways_chaos.harness.episodes import child_limits
    from pathways_chaos.harness.errors import ChaosConfigError

    try:
        size = child_limits.parse_bytes(raw, "--chaos-memory-limit")
    except ChaosConfigError as error:
        raise pytest.UsageError(str(error)) from None
    limits = dataclasses.replace(child_limits.ChildLimits(), memory_bytes=size)
    config.stash[_PREVIOUS_LIMITS] = child_limits.set_default_limits(limits)


def pytest_unconfigure(config: pytest.Config) -> None:
    limits = config.stash.get(_PREVIOUS_LIMITS, None)
    if limits is not None:
        from pathways_chaos.harness.episodes import child_limits

        child_limits.set_default_limits(limits)
    previous = config.stash.get(_PREVIOUS_DEADLINE, None)
    if previous is not None:
        from pathways_chaos.harness.engine import deadline

        deadline.set_default_deadline(previous)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Makes the fake devices when a collected test needs them, before the first test runs."""
    from pathways_chaos.harness.pytest_plugin import activation

    if not activation.is_active(config) and activation.items_ask_for_devices(items):
        activation.activate(config)
    if config.getoption("chaos_loop"):
        _run_the_loop_scenarios_only(config, items)


def _run_the_loop_scenarios_only(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With --chaos-loop, the chaos suite runs the user's loop: its reference-trainer
    scenarios (the toolkit's own trainer) are deselected."""
    from pathlib import Path

    from pathways_chaos.harness.pytest_plugin.activation import suites_dir

    suite = (suites_dir() / "chaos").resolve()
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        in_suite = Path(str(item.path)).resolve().parent == suite
        uses_loop = "chaos_loop" in getattr(item, "fixturenames", ())
        (drop if in_suite and not uses_loop else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Which judges each chaos test's verdict ran (nothing when no test ran an episode)."""
    from pathways_chaos.harness.pytest_plugin.judges_summary import write_summary

    write_summary(terminalreporter, config)


@pytest.hookimpl(tryfirst=True)
def pytest_report_teststatus(
    report: pytest.TestReport, config: pytest.Config
) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
    """A test whose judge raised (a bug in pathways-chaos) is an ERROR, not a failure."""
    from pathways_chaos.harness.pytest_plugin.judges_summary import judge_error_status

    return judge_error_status(report)


def pytest_report_header(config: pytest.Config) -> str:
    from pathways_chaos.fixtures.cluster import fake_topology  # registered above: no new import

    return (
        f"pathways-chaos: fake cluster {fake_topology(config)}, "
        f"clock {config.getoption('chaos_clock')}"
    )
