"""Multi-Tier Checkpointing ramdisk size per pod, by the rule of thumb in the MTC guide.

checkpoint = parameters x 12 bytes (weights and optimizer state); each pod holds its host's
shard twice (``2 x checkpoint / hosts per slice``); add a 10-15% buffer. Sizes are in decimal
GB as the guide writes them; Kubernetes quantities (``60Gi``) are converted exactly.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pathways_chaos.harness.acceptance.manifest import (
    in_memory_volume_sizes,
    read_manifest_file,
    unlisted,
)
from pathways_chaos.harness.acceptance.table import CheckResult, Finding
from pathways_chaos.harness.engine.option_values import OneLineArgumentParser, Range
from pathways_chaos.harness.errors import ChaosConfigError

BYTES_PER_PARAM = 12
DEFAULT_BUFFER = 0.15
GB = 1e9
GIB = 2**30

#: More parameters than any model has (a quadrillion): a larger count is a typo.
MAX_PARAMS = 1e15
_COUNT_SUFFIXES = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


@dataclasses.dataclass(frozen=True)
class RamdiskSizing:
    """The guide's calculation for one model on one slice shape."""

    params: float
    hosts_per_slice: int
    buffer: float = DEFAULT_BUFFER

    def __post_init__(self) -> None:
        if not self.params > 0:
            raise ChaosConfigError(f"params={self.params}: give the model's parameter count > 0")
        if self.hosts_per_slice < 1:
            raise ChaosConfigError(
                f"hosts per slice={self.hosts_per_slice}: give the number of hosts (pods) in one "
                "slice, >= 1"
            )
        if not 0 <= self.buffer < 1:
            raise ChaosConfigError(
                f"buffer={self.buffer}: give a fraction such as 0.15 (or 15%), below 1"
            )

    @property
    def checkpoint_bytes(self) -> float:
        return self.params * BYTES_PER_PARAM

    @property
    def shard_bytes(self) -> float:
        return self.checkpoint_bytes / self.hosts_per_slice

    @property
    def ramdisk_bytes(self) -> float:
        return 2 * self.shard_bytes

    @property
    def required_bytes(self) -> float:
        return self.ramdisk_bytes * (1 + self.buffer)

    def lines(self) -> list[str]:
        """The calculation, one step a line, as the guide walks through it."""
        return [
            f"{'checkpoint':<15}{self.params:.4g} params x {BYTES_PER_PARAM} bytes"
            f" = {_gb(self.checkpoint_bytes)}",
            f"{'per-host shard':<15}{_gb(self.checkpoint_bytes)} / {self.hosts_per_slice} hosts "
            f"per slice = {_gb(self.shard_bytes)}",
            f"{'ramdisk':<15}{_gb(self.shard_bytes)} x 2 = {_gb(self.ramdisk_bytes)}",
            f"{'with buffer':<15}{_gb(self.ramdisk_bytes)} x {1 + self.buffer:.2f}"
            f" = {_gb(self.required_bytes)} ({self.required_bytes / GIB:.2f} GiB) per pod",
        ]


def parse_quantity(text: str | int | float) -> float:
    """Bytes in a Kubernetes quantity (``60Gi``, ``64G``, ``500M``, ``1e9``), by the
    ``kubernetes`` client's own parser."""
    from kubernetes.utils import parse_quantity as kube_quantity

    if isinstance(text, bool):
        text = str(text)
    try:
        return float(kube_quantity(text))
    except (ValueError, TypeError, ArithmeticError):
        raise ChaosConfigError(
            f"size {text!r} is not a Kubernetes quantity: write for example 60Gi or 64G"
        ) from None


def parse_count(text: str) -> float:
    """A parameter count: ``8e9``, ``8000000000``, ``70B``, ``1.5T``."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]?)\s*", text)
    from pathways_chaos.harness.engine.untrusted_files import shown

    if not match or match.group(2).lower() not in _COUNT_SUFFIXES:
        raise ChaosConfigError(
            f"{shown(repr(text))} is not a parameter count: write for example 8e9 or 70B"
        )
    count = float(match.group(1)) * _COUNT_SUFFIXES[match.group(2).lower()]
    if not math.isfinite(count) or not 0 < count <= MAX_PARAMS:
        raise ChaosConfigError(
            f"{shown(text)} is not a parameter count between 1 and {MAX_PARAMS:.0e}: write the "
            "model's count, for example 8e9 or 70B"
        )
    return count


def parse_buffer(text: str, flag: str = "--buffer") -> float:
    """``0.15`` or ``15%``; the option's own name in the one-line refusal."""
    from pathways_chaos.harness.acceptance.options import buffer_fraction

    return buffer_fraction(text, flag)


def check_ramdisk(
    sizing: RamdiskSizing | None,
    configured: Sequence[tuple[str, str]],
    where: str,
    mtc_used: bool = True,
) -> CheckResult:
    """The configured in-memory volume holds the guide's estimate (plus buffer).

    With Multi-Tier Checkpointing in use, a missing CheckpointConfiguration fails (the CSI
    driver has nothing to size the ramdisk from); an unknown parameter count is SKIP.
    """
    title = "CheckpointConfiguration inMemoryVolumeSize holds params x 12 B x 2 / hosts + buffer"
    fix = (
        "raise inMemoryVolumeSize in the CheckpointConfiguration to at least the required size "
        "(pathways-chaos ramdisk --params N --hosts-per-slice H prints it)"
    )
    if not mtc_used:
        return CheckResult("ramdisk-size", title, fix, (), "no Multi-Tier Checkpointing")
    if not configured:
        finding = Finding(
            where,
            "Multi-Tier Checkpointing is set up but no CheckpointConfiguration was given: add "
            "its YAML (kind: CheckpointConfiguration, spec.inMemoryVolumeSize) to "
            "--acceptance-manifest",
        )
        missing_fix = (
            "add a CheckpointConfiguration (kind: CheckpointConfiguration, spec.inMemoryVolumeSize "
            "sized by pathways-chaos ramdisk --params N --hosts-per-slice H) to the manifest you "
            "deploy and pass it with --acceptance-manifest"
        )
        return CheckResult("ramdisk-size", title, missing_fix, (finding,))
    if sizing is None:
        return CheckResult(
            "ramdisk-size",
            title,
            fix,
            skipped="the model's parameter count: pass --acceptance-params N (e.g. 8e9), or "
            "declare params in the adapter",
        )
    findings = []
    notes = []
    for name, size in configured:
        if not size:
            findings.append(Finding(f"{where}: {name}", "spec.inMemoryVolumeSize is not set"))
            continue
        have = parse_quantity(size)
        if have < sizing.required_bytes:
            findings.append(
                Finding(
                    f"{where}: {name}",
                    f"inMemoryVolumeSize {size} = {_gb(have)} < required "
                    f"{_gb(sizing.required_bytes)} ({sizing.params:.3g} params, "
                    f"{sizing.hosts_per_slice} hosts per slice, {sizing.buffer:.0%} buffer)",
                )
            )
        else:
            notes.append(f"{name}: {size} = {_gb(have)} >= {_gb(sizing.required_bytes)} required")
    return CheckResult("ramdisk-size", title, fix, tuple(findings), "; ".join(notes))


#: Hosts (pods) of one slice: the largest TPU slices have a few thousand.
HOSTS_PER_SLICE = Range(1, 65_536, whole=True, unit="hosts")


def build_parser() -> argparse.ArgumentParser:
    """``pathways-chaos ramdisk``'s options (the generated bad-input test walks them)."""
    parser = OneLineArgumentParser(
        prog="pathways-chaos ramdisk",
        description="Multi-Tier Checkpointing ramdisk size per pod (params x 12 B x 2 / hosts "
        "per slice, plus a buffer).",
    )
    parser.add_argument("--params", required=True, help="parameter count, e.g. 8e9 or 70B")
    parser.add_number(
        "--hosts-per-slice", HOSTS_PER_SLICE, required=True, help="hosts (pods) in one slice"
    )
    parser.add_argument(
        "--buffer", default=str(DEFAULT_BUFFER), help="safety buffer, e.g. 0.15 or 15%%"
    )
    parser.add_argument(
        "--checkpoint-configuration",
        metavar="FILE",
        help="YAML holding a CheckpointConfiguration: compare its inMemoryVolumeSize",
    )
    return parser


def ramdisk_main(argv: Sequence[str] | None = None) -> int:
    """``pathways-chaos ramdisk``: prints the calculation; 1 if the configured size is short."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        sizing = RamdiskSizing(
            parse_count(args.params), args.hosts_per_slice, parse_buffer(args.buffer)
        )
        configured: list[tuple[str, str]] = []
        if args.checkpoint_configuration:
            configured = in_memory_volume_sizes(_load_yaml(Path(args.checkpoint_configuration)))
            if not configured:
                raise ChaosConfigError(
                    f"{args.checkpoint_configuration}: no CheckpointConfiguration in the file: "
                    "pass the file that holds kind: CheckpointConfiguration"
                )
        # The configured sizes are the file's: a bad one is bad input, said before any output.
        result = (
            check_ramdisk(sizing, configured, args.checkpoint_configuration) if configured else None
        )
    except ChaosConfigError as error:
        print(f"pathways-chaos ramdisk: {error}", file=sys.stderr)
        return 2
    for line in sizing.lines():
        print(line)
    if not configured:
        print(f"configure each pod's ramdisk with at least {_gb(sizing.required_bytes)}")
        return 0
    assert result is not None  # made above for the configured sizes
    print(f"{result.status}: {result.reason}")
    return 0 if result.ok else 1


def _load_yaml(path: Path) -> list[Any]:
    """The file's documents as the manifest checks read them (untrusted: regular file, size,
    UTF-8, aliases; a ``kind: List`` stands for its items; JSON too)."""
    return [d for d in unlisted(read_manifest_file(path)) if d is not None]


def _gb(n: float) -> str:
    """Decimal units as the guide writes them; a toy model's few bytes stay readable."""
    for unit, size in (("GB", GB), ("MB", 1e6), ("kB", 1e3)):
        if n >= 0.01 * size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"
