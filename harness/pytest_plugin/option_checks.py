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

#: Environment variables that stand in for options, and the option each stands for.
_ENV_INTS = {
    "PATHWAYS_CHAOS_SLICES": "--fake-slices",
    "PATHWAYS_CHAOS_DEVICES_PER_SLICE": "--fake-devices-per-slice",
}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def check_options(config: pytest.Config) -> None:
    """Raises ``pytest.UsageError`` (one line naming the option and the fix) on a bad value."""
    problem = first_problem(config)
    if problem:
        raise pytest.UsageError(f"pathways-chaos: {problem}")


def _opt(config: pytest.Config, name: str) -> object:
    return config.getoption(name, default=None)


def first_problem(config: pytest.Config) -> str | None:
    for name, flag in (
        ("fake_slices", "--fake-slices"),
        ("fake_devices_per_slice", "--fake-devices-per-slice"),
    ):
        value = _opt(config, name)
        if value is not None and (not isinstance(value, int) or value < 1):
            return f"{flag}={value}: use a whole number >= 1 (for example {flag}=4)"
    sizes: dict[str, int] = {}
    for env, flag in _ENV_INTS.items():
        raw = os.environ.get(env)
        if raw is None or raw == "":
            continue
        try:
            sizes[flag] = int(raw)
        except ValueError:
            return f"{env}={raw!r} is not a whole number: set it like {flag}, e.g. {env}=4"
        if sizes[flag] < 1:
            return f"{env}={raw}: use a whole number >= 1"
    slices = _opt(config, "fake_slices") or sizes.get("--fake-slices", 4)
    per_slice = _opt(config, "fake_devices_per_slice") or sizes.get("--fake-devices-per-slice", 2)
    from pathways_chaos.harness.engine.topology import SliceTopology
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
    every = _opt(config, "chaos_progress_every")
    if every is not None and int(str(every)) < 1:
        return f"--chaos-progress-every={every}: use a whole number of steps >= 1"
    journal_dir = _opt(config, "chaos_journal_dir")
    if journal_dir is not None:
        if not str(journal_dir).strip():
            return "--chaos-journal-dir is empty: name a folder (or leave it out for the default)"
        if Path(str(journal_dir)).exists() and not Path(str(journal_dir)).is_dir():
            return f"--chaos-journal-dir={journal_dir}: exists and is not a folder"
    lease = _opt(config, "chaos_lease_seconds")
    if lease is not None and int(str(lease)) < 1:
        return f"--chaos-lease-seconds={lease}: use a whole number of seconds >= 1"
    budget = _opt(config, "chaos_budget")
    if budget is not None and not (float(str(budget)) > 0 and float(str(budget)) < float("inf")):
        return f"--chaos-budget={budget}: use a number of seconds > 0 (for example 120)"
    search_report = _opt(config, "chaos_search_report")
    if search_report is not None and Path(str(search_report)).is_dir():
        return f"--chaos-search-report={search_report} is a folder: name a file, e.g. search.json"
    log_dir = _opt(config, "chaos_log_dir")
    if log_dir is not None and Path(str(log_dir)).exists() and not Path(str(log_dir)).is_dir():
        return f"--chaos-log-dir={log_dir}: exists and is not a folder"
    return None


__all__ = ["check_options", "first_problem"]
