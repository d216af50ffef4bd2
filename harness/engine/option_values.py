"""The one parser for every numeric command-line option: seconds, counts, sizes, budgets.

``float("nan")``, ``float("inf")`` and ``1e308`` are numbers to Python, and each reached a Job
or a deadline as nonsense (a traceback, a 309-digit ``activeDeadlineSeconds``). Here a value is
finite, within a named range, a whole number where one is needed, and a refusal is one line
naming the flag, the value and what to write instead. Options are parsed as text by argparse
and checked here, so the error is ours (one line), not argparse's usage block.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from pathways_chaos.harness.engine.untrusted_files import shown
from pathways_chaos.harness.errors import ChaosConfigError


@dataclasses.dataclass(frozen=True)
class Range:
    """What a flag accepts: whole numbers or not, the bounds, and the unit for the message."""

    minimum: float
    maximum: float
    whole: bool = False
    unit: str = ""
    #: Whether ``minimum`` itself is allowed (``--budget`` must be > 0, not 0).
    inclusive: bool = True

    def describe(self) -> str:
        kind = "a whole number" if self.whole else "a number"
        unit = f" of {self.unit}" if self.unit else ""
        low, high = _plain(self.minimum), _plain(self.maximum)
        if self.inclusive:
            return f"{kind}{unit} from {low} to {high}"
        return f"{kind}{unit} > {low} and at most {high}"


def _plain(value: float) -> str:
    """A bound as a person writes it: 604800, not 6.048e+05."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def parse_number(raw: object, flag: str, allowed: Range) -> float:
    """``raw`` (text or a number) checked against ``allowed``; one line naming ``flag`` if not."""
    value: float | None
    if isinstance(raw, bool):
        value = None
    elif isinstance(raw, int | float):
        value = float(raw)
    else:
        text = str(raw).strip()
        try:
            if not text.isascii():  # int() takes any script's digits: "١٢" is 12
                raise ValueError(text)
            value = float(int(text)) if allowed.whole and re.fullmatch(r"[+-]?\d+", text) else None
            if value is None:
                value = float(text)
        except (ValueError, OverflowError):
            value = None
    ok = (
        value is not None
        and math.isfinite(value)
        and (value >= allowed.minimum if allowed.inclusive else value > allowed.minimum)
        and value <= allowed.maximum
        and (not allowed.whole or value.is_integer())
    )
    if not ok or value is None:
        raise ChaosConfigError(f"{flag} {shown(raw, 40)!r}: use {allowed.describe()}")
    return value


def parse_whole(raw: object, flag: str, allowed: Range) -> int:
    """:func:`parse_number` for a count: an ``int``."""
    return int(parse_number(raw, flag, dataclasses.replace(allowed, whole=True)))


#: Kubernetes CPU: cores ("2", "0.5") or millicores ("500m").
_CPU = re.compile(r"(\d+(?:\.\d+)?)(m?)")
#: Kubernetes memory: bytes with a decimal or binary suffix ("8Gi", "512M", "1e9" is refused).
_MEMORY = re.compile(r"(\d+)(Ki|Mi|Gi|Ti|k|K|M|G|T)?")
_MEMORY_SCALE = {
    None: 1,
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
MAX_CPU = 1024.0
MAX_MEMORY = 64 * 2**40


def parse_cpu(raw: str, flag: str = "--cpu") -> str:
    """A Kubernetes CPU quantity the API server accepts, > 0 and at most ``MAX_CPU`` cores."""
    match = _CPU.fullmatch(str(raw).strip())
    cores = 0.0
    if match:
        cores = float(match[1]) / (1000 if match[2] else 1)
    if not match or not 0 < cores <= MAX_CPU:
        raise ChaosConfigError(
            f"{flag} {shown(raw, 40)!r}: use cores (e.g. 2 or 0.5) or millicores (e.g. 500m), "
            f"more than 0 and at most {MAX_CPU:g} cores"
        )
    return str(raw).strip()


def parse_memory(raw: str, flag: str = "--memory") -> str:
    """A Kubernetes memory quantity the API server accepts, > 0 and at most 64 Ti."""
    match = _MEMORY.fullmatch(str(raw).strip())
    size = 0
    if match:
        size = int(match[1]) * _MEMORY_SCALE[match[2]]
    if not match or not 0 < size <= MAX_MEMORY:
        raise ChaosConfigError(
            f"{flag} {shown(raw, 40)!r}: use bytes with a unit, e.g. 8Gi or 512Mi (more than 0, "
            "at most 64Ti)"
        )
    return str(raw).strip()


def number_option(flag: str, allowed: Range) -> Callable[[str], float | int]:
    """An argparse ``type=`` checking a value against ``allowed`` (an ``int`` when whole): its
    refusal is :func:`parse_number`'s one line. The range is kept on it as ``allowed``."""

    def parse(raw: str) -> float | int:
        try:
            if allowed.whole:
                return parse_whole(raw, flag, allowed)
            return parse_number(raw, flag, allowed)
        except ChaosConfigError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parse.allowed = allowed  # type: ignore[attr-defined]
    parse.__name__ = "whole number" if allowed.whole else "number"
    return parse


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse, whose refusal (an unknown option, a value that starts with '-', a missing
    one, a number out of its range) is one line and exit 2, not a 15-line usage block;
    ``--help`` is unchanged."""

    def error(self, message: str) -> NoReturn:
        first = message.splitlines()[0] if message.strip() else "bad arguments"
        # "argument --steps: --steps 'abc': use ...": the flag once
        first = re.sub(r"^argument (\S+): (?=\1 )", "", first)
        self.exit(2, f"{self.prog}: error: {first} (see {self.prog} --help)\n")

    def add_number(self, flag: str, allowed: Range, **kwargs: Any) -> argparse.Action:
        """``add_argument(flag, ...)`` of a number checked against ``allowed`` at parse time."""
        return self.add_argument(flag, type=number_option(flag, allowed), **kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        given = list(sys.argv[1:] if args is None else args)
        for arg in given:
            if "\0" in arg:
                self.error(f"{shown(arg, 40)!r} holds a NUL character: no option or path can")
        return super().parse_known_args(given, namespace)


__all__ = [
    "OneLineArgumentParser",
    "Range",
    "number_option",
    "parse_cpu",
    "parse_memory",
    "parse_number",
    "parse_whole",
]
