"""The pytest options' values, checked once in ``pytest_configure``: one line, exit 4, no traceback.

Why here and not where each option is used: a bad value found in a fixture fails every test
that uses it (one traceback each), and one found while the plugin sets up JAX is an
INTERNALERROR. ``pytest.UsageError`` is pytest's own way to say "the command line is wrong".
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from pathways_chaos.harness.engine.option_values import Range, parse_number, parse_whole
from pathways_chaos.harness.engine.untrusted_files import shown
from pathways_chaos.harness.errors import ChaosConfigError

JOURNAL_ENV = "PATHWAYS_CHAOS_JOURNAL_DIR"
#: Kubernetes API integers (a Lease's leaseDurationSeconds) are int32.
INT32_MAX = 2**31 - 1
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


#: Number options, taken as text (pytest's own refusal of ``type=int`` is its usage block):
#: checked here by option_values' one parser and written back as numbers.
def _numbers() -> tuple[tuple[str, str, Range], ...]:
    from pathways_chaos.harness.engine.topology import DEVICES_PER_SLICE, SLICES

    return (
        ("fake_slices", "--fake-slices", SLICES),
        ("fake_devices_per_slice", "--fake-devices-per-slice", DEVICES_PER_SLICE),
        ("chaos_progress_every", "--chaos-progress-every", PROGRESS_EVERY),
        ("chaos_lease_seconds", "--chaos-lease-seconds", LEASE_SECONDS),
        ("chaos_budget", "--chaos-budget", BUDGET),
    )


PROGRESS_EVERY = Range(1, 10_000_000, whole=True, unit="steps")
#: Kubernetes API integers (a Lease's leaseDurationSeconds) are int32.
LEASE_SECONDS = Range(1, INT32_MAX, whole=True, unit="seconds (the Lease API's int32)")
BUDGET = Range(0, 7 * 24 * 3600, unit="seconds", inclusive=False)
#: Options that take one of a few words (pytest's ``choices=`` refusal is a usage block too).
CHOICES = {
    "chaos_clock": ("--chaos-clock", ("fake", "real")),
    "chaos_progress": ("--chaos-progress", ("auto", "on", "off")),
    "chaos_profile": ("--chaos-profile", ("ci", "dev", "nightly")),
}


def check_options(config: pytest.Config) -> None:
    """Raises ``pytest.UsageError`` (one line naming the option and the fix) on a bad value."""
    problem = _typed_problem(config) or first_problem(config) or _loop_problem(config)
    if problem:
        raise pytest.UsageError(f"pathways-chaos: {problem}")


def _typed_problem(config: pytest.Config) -> str | None:
    """The number and word options, parsed once (``config.option`` then holds the number)."""
    for dest, flag, allowed in _numbers():
        raw = _opt(config, dest)
        if raw is None:
            continue
        try:
            setattr(
                config.option,
                dest,
                parse_whole(raw, flag, allowed)
                if allowed.whole
                else (parse_number(raw, flag, allowed)),
            )
        except ChaosConfigError as error:
            return str(error)
    for dest, (flag, words) in CHOICES.items():
        value = _opt(config, dest)
        if value is not None and value not in words:
            return f"{flag} {shown(value, 40)!r}: use one of {', '.join(words)}"
    return None


def _loop_problem(config: pytest.Config) -> str | None:
    """A ``--chaos-loop`` that cannot load: said once, before any test (it is imported in a
    child process, never in pytest's)."""
    loop = _opt(config, "chaos_loop")
    if not isinstance(loop, str) or not loop.strip():
        return None
    from pathways_chaos.harness.episodes.supervisor import check_loop

    return check_loop(loop)


def _opt(config: pytest.Config, name: str) -> object:
    return config.getoption(name, default=None)


def first_problem(config: pytest.Config) -> str | None:
    # One piece (over 80 lines): the options are checked in the order a person reads them,
    # first problem wins; split, that order would be spread over several functions.
    loop = _opt(config, "chaos_loop")
    if isinstance(loop, str) and not loop.strip():
        return (
            "--chaos-loop is empty: give MODULE:FUNC (or FILE.py:FUNC) of your loop, or leave "
            "the option out for the sample loop"
        )
    from pathways_chaos.harness.engine.topology import SliceTopology, env_sizes

    try:
        sizes = env_sizes()
    except ChaosConfigError as error:
        return str(error)
    slices = _opt(config, "fake_slices") or sizes.get("--fake-slices", 4)
    per_slice = _opt(config, "fake_devices_per_slice") or sizes.get("--fake-devices-per-slice", 2)
    from pathways_chaos.harness.errors import ChaosError

    try:
        SliceTopology(int(str(slices)), int(str(per_slice)))
    except ChaosError as error:
        return str(error)
    cluster = _opt(config, "cluster")
    if cluster is not None:
        if not str(cluster).strip():
            return (
                "--cluster is empty: name a kube context or KUBECONFIG_PATH:CONTEXT, or leave "
                "--cluster out to run on the in-process fake cluster"
            )
        for name in ("namespace", "jobset"):
            if not _opt(config, name):
                return (
                    f"--cluster needs --namespace and --jobset: the namespace and name of the "
                    f"Pathways JobSet the faults may touch (--{name} is missing)"
                )
    namespace = _opt(config, "namespace")
    if namespace is not None and not _DNS_LABEL.match(str(namespace)):
        return f"--namespace={namespace!r} is not a Kubernetes namespace name (a DNS label)"
    allowed_list = _opt(config, "chaos_allow_namespace")
    for allowed in allowed_list if isinstance(allowed_list, list) else []:
        if not _DNS_LABEL.match(str(allowed)):
            return (
                f"--chaos-allow-namespace={allowed!r} is not a Kubernetes namespace name; "
                "give one namespace per option"
            )
    journal_dir = _opt(config, "chaos_journal_dir")
    if journal_dir is not None and not str(journal_dir).strip():
        return "--chaos-journal-dir is empty: name a folder (or leave it out for the default)"
    from pathways_chaos.harness.engine.untrusted_files import (
        check_folder_target,
        check_output_file,
    )

    places = [
        ("--chaos-journal-dir", journal_dir),
        (JOURNAL_ENV, os.environ.get(JOURNAL_ENV)),
        ("--chaos-log-dir", _opt(config, "chaos_log_dir")),
    ]
    for flag, folder in places:
        if folder:
            try:
                check_folder_target(str(folder), what=flag)
            except ChaosError as error:
                return str(error)
    from pathways_chaos.harness.acceptance.options import acceptance_problem

    problem = acceptance_problem(lambda dest: _opt(config, dest))
    if problem:
        return problem
    for flag, dest in (
        ("--acceptance-source", "acceptance_source"),
        ("--acceptance-manifest", "acceptance_manifest"),
    ):
        given = _opt(config, dest)
        for raw in given if isinstance(given, list) else []:
            try:
                _check_input_files(flag, Path(str(raw)))
            except ChaosError as error:
                return str(error)
    for flag, dest in (
        ("--acceptance-report", "acceptance_report"),
        ("--chaos-report", "chaos_report"),
        ("--chaos-search-report", "chaos_search_report"),
    ):
        report = _opt(config, dest)
        if report is None:
            continue
        if not str(report).strip():
            return f"{flag} is empty: name a file (e.g. report.html), or leave the option out"
        try:
            check_output_file(str(report), what=flag)
        except ChaosError as error:
            return str(error)
    for name, flag in (
        ("chaos_deadline", "--chaos-deadline"),
        ("chaos_wall_deadline", "--chaos-wall-deadline"),
    ):
        seconds = _opt(config, name)
        if seconds is not None:
            from pathways_chaos.harness.engine.deadline import parse_seconds

            try:
                parse_seconds(str(seconds), flag)
            except ChaosError as error:
                return str(error)
    if cluster is None:
        if _opt(config, "chaos_arm"):
            return (
                "--chaos-arm needs --cluster: it arms faults against a real cluster; on the "
                "in-process fake (no --cluster) there is nothing to arm"
            )
        if allowed_list:
            return (
                "--chaos-allow-namespace needs --cluster: it widens where faults may act on a "
                "real cluster; without --cluster nothing acts on one"
            )
    params = _opt(config, "acceptance_params")
    if params is not None:
        from pathways_chaos.harness.acceptance.ramdisk import parse_count

        try:
            parse_count(str(params))
        except ChaosError as error:
            return f"--acceptance-params: {error}"
    return None


def _check_input_files(flag: str, path: Path) -> None:
    """Every file an acceptance option names, read as untrusted, once, before any test.

    A binary source or a YAML "billion laughs" manifest is one line here; found later by a
    session fixture, it is one error per test that uses it.
    """
    from pathways_chaos.harness.acceptance.manifest import manifest_files, read_manifest_file
    from pathways_chaos.harness.acceptance.sources import python_files, read_source_text
    from pathways_chaos.harness.engine.owned_paths import lstat_or_none

    yaml = flag == "--acceptance-manifest"
    if lstat_or_none(path, flag) is None:  # a name too long: one line, not an INTERNALERROR
        return  # "no such file" is said by the check that reads it, with its own advice
    if path.is_dir():
        files = manifest_files(path) if yaml else list(python_files(path))  # a chart: refused
    else:
        files = [path]
    for file in files:  # read as the suite reads them: Python's coding line, Helm refused
        if yaml:
            read_manifest_file(file, what=f"{flag} file")
        else:
            read_source_text(file, what=f"{flag} file")


__all__ = ["check_options", "first_problem"]
