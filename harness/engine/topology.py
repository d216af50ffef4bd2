"""The shape of a multi-slice allocation, and making that many CPU devices before JAX starts."""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, ClassVar

from pathways_chaos.harness.engine.option_values import Range
from pathways_chaos.harness.errors import ChaosConfigError

#: Beyond this many CPU devices start-up cost grows fast (4096 take 17 s and 1.4 GB here) and,
#: further on, XLA aborts the whole process in pthread_create; refuse before that happens.
MAX_CPU_DEVICES = 1024
#: A fake cluster's shape, as options take it (SliceTopology checks the product).
SLICES = Range(1, MAX_CPU_DEVICES, whole=True, unit="slices")
DEVICES_PER_SLICE = Range(1, MAX_CPU_DEVICES, whole=True, unit="devices")


@dataclasses.dataclass(frozen=True)
class SliceTopology:
    """N slices of M devices each; slice s owns devices [s*M, (s+1)*M) of the CPU platform."""

    #: The fake cluster's shape when nothing names one: 4 slices of 2 CPU devices.
    DEFAULT: ClassVar[SliceTopology]

    num_slices: int
    devices_per_slice: int

    def __post_init__(self) -> None:
        for name in ("num_slices", "devices_per_slice"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ChaosConfigError(
                    f"{name}={value!r} does not fit: use a whole number >= 1 "
                    "(for example 4 slices x 2 devices)"
                )
        if self.device_count > MAX_CPU_DEVICES:
            raise ChaosConfigError(
                f"{self.num_slices}x{self.devices_per_slice} needs {self.device_count} CPU "
                "devices, "
                f"more than the {MAX_CPU_DEVICES} this toolkit can make in one process: "
                "use fewer slices or fewer devices per slice"
            )

    @property
    def device_count(self) -> int:
        return self.num_slices * self.devices_per_slice

    def __str__(self) -> str:
        return f"{self.num_slices}x{self.devices_per_slice}"

    @classmethod
    def parse(cls, text: str) -> SliceTopology:
        """Parses ``NxM`` (N slices of M devices)."""
        n, sep, m = text.lower().partition("x")
        whole = sep and all(part.isascii() and part.isdigit() and len(part) <= 6 for part in (n, m))
        if not whole:
            raise ChaosConfigError(
                f"slice shape {text!r} is not NxM: write for example 4x2 (4 slices of 2 devices)"
            )
        return cls(int(n), int(m))  # its own one line when a number is out of range


SliceTopology.DEFAULT = SliceTopology(4, 2)


def jax_backend_started() -> bool:
    """True once JAX has created its backends (after which the CPU device count is fixed)."""
    if "jax" not in sys.modules:
        return False
    from jax._src import xla_bridge  # no public API tells this without starting the backend

    return bool(xla_bridge._backends)


def request_cpu_devices(count: int) -> None:
    """Makes JAX start with at least ``count`` CPU devices, or says why it cannot.

    Must run before the first JAX computation (the plugin does it in ``pytest_configure``, the
    CLI before it imports anything that touches JAX).
    """
    if count > MAX_CPU_DEVICES:
        raise ChaosConfigError(
            f"{count} CPU devices requested, more than the {MAX_CPU_DEVICES} this toolkit can "
            "make in one process: use fewer slices or fewer devices per slice"
        )
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    if jax_backend_started():
        have = len(jax.devices("cpu"))
        if have < count:
            raise ChaosConfigError(
                f"JAX already started with {have} CPU devices and cannot make the {count} this "
                "fake cluster needs: pass --fake-slices/--fake-devices-per-slice (or set "
                "PATHWAYS_CHAOS_CPU_DEVICES) so they are made before JAX starts, "
                "or run this shape in a new process"
            )
        return
    current = int(jax.config.jax_num_cpu_devices or 0)
    if current < count:
        jax.config.update("jax_num_cpu_devices", count)


def cpu_devices(count: int) -> list[Any]:
    """The first ``count`` CPU devices, in id order."""
    request_cpu_devices(count)
    import jax

    devices = sorted(jax.devices("cpu"), key=lambda d: d.id)
    return devices[:count]


#: Environment variables that stand in for the fake's shape options: (option, its range).
ENV_SIZES = {
    "PATHWAYS_CHAOS_SLICES": ("--fake-slices", SLICES),
    "PATHWAYS_CHAOS_DEVICES_PER_SLICE": ("--fake-devices-per-slice", DEVICES_PER_SLICE),
}


def env_sizes() -> dict[str, int]:
    """The fake cluster's shape from ``PATHWAYS_CHAOS_SLICES`` / ``_DEVICES_PER_SLICE``, by
    the option each stands for, parsed as that option is (ChaosConfigError in one line)."""
    from pathways_chaos.harness.engine.option_values import parse_whole

    sizes: dict[str, int] = {}
    for env, (flag, allowed) in ENV_SIZES.items():
        raw = os.environ.get(env)
        if raw:
            sizes[flag] = parse_whole(raw, f"{env} (as {flag})", allowed)
    return sizes


def elastic_slices_fit(elastic: int, slices: int) -> bool:
    """The proxy's elastic flag counts the slices that may be lost and come back: 1 up to
    the JobSet's worker slices (pathwaysutils' generator refuses more; its samples and
    google/pathways-job's run 1 elastic slice of 2). The acceptance row and the ``--cluster``
    preflight hold a JobSet to this one rule."""
    return 1 <= elastic <= slices
