"""One fault model for every injector: a fault, when it fires, and its command-line text form.

Text form of one scheduled fault: ``KIND@TRIGGER=VALUE[:PARAM=VALUE...]``, for example
``data_loss@step=12:slice=2``. A schedule joins them with commas. ``parse_schedule`` and
``Schedule.to_text`` round-trip, so a shrunk hypothesis failure can be pasted into a replay.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar, Self, TypeVar

TargetT = TypeVar("TargetT")

#: Trigger kinds: ``step`` fires after that step ran (before it is committed), ``time`` at that
#: many seconds on the episode clock, ``restore`` on the Nth restore of the run, ``save`` on
#: the Nth snapshot save, ``attempt`` at the start of the Nth attempt, ``callback`` inside the
#: Nth call of the trainer's elastic-event callback (``elastic_event``).
TRIGGER_KINDS = ("step", "time", "restore", "save", "attempt", "callback")


class FaultSpecError(ValueError):
    """A fault or schedule text that cannot be understood."""


@dataclasses.dataclass(frozen=True, order=True)
class Trigger:
    """When a fault fires."""

    kind: str
    value: float | int

    def __post_init__(self) -> None:
        if self.kind not in TRIGGER_KINDS:
            raise FaultSpecError(
                f"unknown trigger {self.kind!r}: use one of {', '.join(TRIGGER_KINDS)}"
                " (for example data_loss@step=12:slice=2)"
            )
        if self.value < 0:
            raise FaultSpecError(f"trigger {self.kind}={self.value} is negative: use a value >= 0")

    def to_text(self) -> str:
        return f"{self.kind}={_format_value(self.value)}"


_REGISTRY: dict[str, type[Fault[Any]]] = {}


@dataclasses.dataclass(frozen=True)
class Fault[TargetT](abc.ABC):
    """Something that goes wrong, and (where it means something) how it is undone.

    Subclasses are frozen dataclasses whose fields are the fault's parameters; ``kind`` is the
    name used in the text and JSON forms.
    """

    kind: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind:
            if cls.kind in _REGISTRY and _REGISTRY[cls.kind] is not cls:
                raise TypeError(f"fault kind {cls.kind!r} registered twice")
            _REGISTRY[cls.kind] = cls

    @abc.abstractmethod
    def inject(self, target: TargetT) -> list[str]:
        """Makes the fault happen; returns one line per thing it touched."""

    def heal(self, target: TargetT) -> list[str]:
        """Undoes the fault where that means something; returns what it touched."""
        del target
        return []

    @abc.abstractmethod
    def describe(self) -> str:
        """One line a person reads in a report."""

    def params(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.params()}

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Self:
        names = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(params) - set(names))
        if unknown:
            raise FaultSpecError(
                f"{cls.kind}: unknown parameter(s) {', '.join(unknown)}; "
                f"it takes {', '.join(names) or 'no parameters'}"
            )
        try:
            return cls(**{k: _coerce(names[k].type, v) for k, v in params.items()})
        except TypeError as error:
            raise FaultSpecError(f"{cls.kind}: {error}") from None


def fault_kinds() -> dict[str, type[Fault[Any]]]:
    """Every registered fault kind (importing faults.slice and faults.kubernetes fills it)."""
    _load_builtin_kinds()
    return dict(_REGISTRY)


def fault_from_json(data: Mapping[str, Any]) -> Fault[Any]:
    params = dict(data)
    kind = params.pop("kind", None)
    return _fault_class(str(kind)).from_params(params)


@dataclasses.dataclass(frozen=True)
class ScheduledFault:
    """A fault and the moment it fires."""

    at: Trigger
    fault: Fault[Any]

    def to_text(self) -> str:
        parts = [f"{self.fault.kind}@{self.at.to_text()}"]
        defaults = {f.name: f.default for f in dataclasses.fields(self.fault)}
        parts += [
            f"{k}={_format_value(v)}"
            for k, v in self.fault.params().items()
            if v != defaults.get(k, dataclasses.MISSING)
        ]
        return ":".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"at": {"kind": self.at.kind, "value": self.at.value}, "fault": self.fault.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ScheduledFault:
        return cls(Trigger(data["at"]["kind"], data["at"]["value"]), fault_from_json(data["fault"]))


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Faults at steps or times; the order of entries is the order they were written."""

    entries: tuple[ScheduledFault, ...] = ()

    def __iter__(self) -> Iterator[ScheduledFault]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def to_text(self) -> str:
        return ",".join(e.to_text() for e in self.entries)

    def to_json(self) -> str:
        return json.dumps([e.to_json() for e in self.entries])

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        return cls(tuple(ScheduledFault.from_json(d) for d in json.loads(text)))

    @classmethod
    def of(cls, entries: Iterable[ScheduledFault]) -> Schedule:
        return cls(tuple(entries))


def parse_fault(text: str) -> ScheduledFault:
    """Parses ``KIND@TRIGGER=VALUE[:PARAM=VALUE...]``."""
    text = text.strip()
    head, _, rest = text.partition(":")
    kind, sep, trigger_text = head.partition("@")
    if not sep:
        raise FaultSpecError(
            f"{text!r} has no trigger: write KIND@step=N or KIND@time=SECONDS, "
            "for example data_loss@step=12:slice=2"
        )
    cls = _fault_class(kind)
    trig_kind, eq, trig_value = trigger_text.partition("=")
    if not eq:
        raise FaultSpecError(f"{text!r}: trigger {trigger_text!r} needs a value, e.g. step=12")
    trigger = Trigger(trig_kind, _parse_number(trig_value, text))
    params: dict[str, Any] = {}
    for item in filter(None, rest.split(":")):
        key, eq, value = item.partition("=")
        if not eq:
            raise FaultSpecError(f"{text!r}: parameter {item!r} needs a value, e.g. slice=2")
        params[key] = value
    return ScheduledFault(trigger, cls.from_params(params))


def parse_schedule(text: str) -> Schedule:
    """Parses comma-separated faults; an empty text is the empty schedule."""
    return Schedule(tuple(parse_fault(part) for part in text.split(",") if part.strip()))


def _fault_class(kind: str) -> type[Fault[Any]]:
    _load_builtin_kinds()
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise FaultSpecError(
            f"unknown fault kind {kind!r}: known kinds are {', '.join(sorted(_REGISTRY))}"
        ) from None


def _load_builtin_kinds() -> None:
    # Importing the injector modules registers their kinds; they import nothing heavy at load.
    from pathways_chaos.faults import slice as _slice  # noqa: F401

    with contextlib.suppress(ImportError):  # the Kubernetes injectors are optional
        from pathways_chaos.faults import kubernetes as _k8s  # noqa: F401


def _parse_number(value: str, context: str) -> int | float:
    try:
        return int(value)
    except ValueError:
        try:
            return float(value)
        except ValueError:
            raise FaultSpecError(f"{context!r}: {value!r} is not a number") from None


def _coerce(annotation: Any, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    if name.startswith("int"):
        return int(value)
    if name.startswith("float"):
        return float(value)
    if name.startswith("bool"):
        if value.lower() not in ("true", "false", "1", "0"):
            raise FaultSpecError(f"{value!r} is not a boolean: use true or false")
        return value.lower() in ("true", "1")
    return value


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return repr(value)
    return str(value)
