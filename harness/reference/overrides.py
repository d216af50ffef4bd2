"""A ``--chaos-trainer`` method that overrides nothing is a silent no-op: say so, by name.

The reference trainer's seams became public (``mesh_and_step``, not ``_mesh_and_step``); a
subclass written against the old names runs as the plain reference and passes everything. A
method of the subclass that the reference does not have, but whose name is close to one it has,
gets a warning naming both.
"""

from __future__ import annotations

import difflib
import warnings

#: How close a name must be to a reference method's to be taken for a misspelt override.
CUTOFF = 0.85


class TrainerOverrideWarning(UserWarning):
    """A subclass method that looks like an override of a reference method but is not one."""


def dead_overrides(cls: type) -> list[tuple[str, str]]:
    """``(name, reference name)`` for each method of ``cls`` (below ``ReferenceTrainer``) that
    the reference does not have and whose name is close to one it has."""
    from pathways_chaos.harness.reference.trainer import ReferenceTrainer

    if not (isinstance(cls, type) and issubclass(cls, ReferenceTrainer)):
        return []
    known = {n for n in dir(ReferenceTrainer) if not (n.startswith("__") and n.endswith("__"))}
    methods = sorted(n for n in known if callable(getattr(ReferenceTrainer, n, None)))
    found: list[tuple[str, str]] = []
    for klass in cls.__mro__:
        if klass is ReferenceTrainer or issubclass(ReferenceTrainer, klass):
            break
        for name, value in vars(klass).items():
            if name in known or (name.startswith("__") and name.endswith("__")):
                continue
            if not callable(value) and not isinstance(value, (staticmethod, classmethod)):
                continue
            same = [m for m in methods if m.lstrip("_") == name.lstrip("_")]
            close = same or difflib.get_close_matches(name, methods, n=1, cutoff=CUTOFF)
            if close and (name, close[0]) not in found:
                found.append((name, close[0]))
    return found


def dead_override_messages(cls: type) -> list[str]:
    """One line per dead override of ``cls``, naming both methods."""
    return [
        f"{cls.__module__}:{cls.__qualname__}.{name} is not a method of ReferenceTrainer, so "
        f"it is never called and the run is the plain reference's: did you mean {ref!r}? "
        f"Rename it to {ref} to override that seam"
        for name, ref in dead_overrides(cls)
    ]


def warn_dead_overrides(cls: type) -> list[str]:
    """Warns once per dead override (``TrainerOverrideWarning``); returns the messages."""
    messages = dead_override_messages(cls)
    for message in messages:
        warnings.warn(message, TrainerOverrideWarning, stacklevel=3)
    return messages
