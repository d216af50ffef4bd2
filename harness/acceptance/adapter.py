"""The adapter: the few lines a team writes around its own training code for the checks.

The acceptance suite needs five things of a trainer, the same five the resilient-training
guide's loop uses: an initial state, a step, a data iterator factory whose iterators have
``get_state``/``set_state``, the sample ids (or a fingerprint) of each batch, and, optionally,
the team's own mesh builder. Everything else (the ``Manager``, ``elastic_retry``, the Orbax
``Snapshotter``, the fault schedule, the event log) is the harness's.

Selected with ``--acceptance-adapter=pkg.module:name`` or ``=path/to/file.py:name``; ``name``
may be a ``TrainingAdapter`` or a function returning one.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from pathways_chaos.harness.engine.user_modules import load_name
from pathways_chaos.harness.errors import ChaosConfigError

RECOVERY_MODES = ("pause_resume", "resize")

Batch = Any
State = Any


class DataIterator(Protocol):
    """What the guide's loop needs of a loader: next batch, and a restorable position."""

    def __next__(self) -> Batch: ...
    def get_state(self) -> Any: ...
    def set_state(self, state: Any) -> None: ...


class DeclaredFields(Protocol):
    """The adapter's fields the guide's loop is configured from (an adapter, or what its child
    said of it)."""

    @property
    def recovery_mode(self) -> str: ...
    @property
    def steps(self) -> int: ...
    @property
    def snapshot_interval(self) -> int: ...
    @property
    def global_batch(self) -> int: ...


@dataclasses.dataclass(frozen=True)
class TrainingAdapter:
    """A team's trainer, as the acceptance checks drive it.

    ``train_step(state, batch) -> (state, loss)`` must be a pure JAX function (the harness jits
    it per mesh); ``batch`` is the iterator's batch with its array leaves on the mesh.
    ``make_iterator(global_batch)`` returns a fresh iterator at the start of the data.
    ``batch_ids(batch)`` returns the batch's sample ids; without it a fingerprint of the batch's
    bytes stands for it (one id per batch). ``build_mesh(manager)`` is the team's mesh builder:
    ``manager`` has the guide's ``active_devices`` and ``active_slice_count``.
    """

    name: str
    init_state: Callable[[], State]
    train_step: Callable[[State, Batch], tuple[State, Any]]
    make_iterator: Callable[[int], DataIterator]
    batch_ids: Callable[[Batch], Sequence[int]] | None = None
    build_mesh: Callable[[Any], Any] | None = None
    recovery_mode: str = "resize"  # the mode the team will run: "pause_resume" or "resize"
    global_batch: int = 16
    #: The ids a correct job consumes, first ``n`` in order (the pre-migration job's order, or
    #: the dataset's); without it the baseline is a plain one-device run of the same code.
    expected_ids: Callable[[int], Sequence[int]] | None = None
    #: The full-size model's parameter count, for ramdisk sizing (the small run's is tiny).
    params: float | None = None
    steps: int = 12
    snapshot_interval: int = 3
    #: ``MODULE:NAME`` or ``FILE.py:NAME`` it was loaded from (``load_adapter``): a child
    #: process loads it again from there, so an adapter of lambdas and closures travels too.
    source: str | None = dataclasses.field(default=None, compare=False, repr=False)

    def __reduce_ex__(self, protocol: Any) -> Any:
        if self.source is not None:
            return (load_adapter, (self.source,))
        return super().__reduce_ex__(protocol)

    def __post_init__(self) -> None:
        if self.recovery_mode not in RECOVERY_MODES:
            raise ChaosConfigError(
                f"adapter {self.name!r}: recovery_mode={self.recovery_mode!r}: use one of "
                f"{', '.join(RECOVERY_MODES)}"
            )
        if self.steps < 6 or self.snapshot_interval < 1 or self.snapshot_interval > self.steps // 2:
            raise ChaosConfigError(
                f"adapter {self.name!r}: steps={self.steps}, snapshot_interval="
                f"{self.snapshot_interval}: use steps >= 6 and 1 <= snapshot_interval <= steps/2, "
                "so an interruption lands after a snapshot"
            )
        if self.global_batch < 1:
            raise ChaosConfigError(f"adapter {self.name!r}: global_batch must be >= 1")

    def ids_of(self, batch: Batch) -> list[int]:
        """The batch's sample ids, or one id made from a sha256 of its bytes."""
        if self.batch_ids is None:
            return [fingerprint(batch)]
        given = self.batch_ids(batch)
        try:
            return [int(i) for i in given]
        except (TypeError, ValueError):
            raise AdapterContractError(
                f"adapter {self.name!r}: batch_ids",
                f"batch_ids returned {shown_value(given)}: return the batch's sample ids as "
                "integers (or leave batch_ids out: a fingerprint of the batch stands in)",
            ) from None


class AdapterContractError(Exception):
    """What the adapter's code returned breaks the adapter's contract: the team's to fix, at
    ``where`` (the field), not a failure of the toolkit's."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(message)
        self.where = where


def shown_value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."


class ManagerView:
    """The elastic ``Manager`` as the guide describes it (``active_devices`` included).

    pathwaysutils 0.1.13 has no ``Manager.active_devices``; a mesh builder written against the
    guide reads it here, in slice order.
    """

    def __init__(self, manager: Any) -> None:
        self._manager = manager

    @property
    def active_devices(self) -> list[Any]:
        m = self._manager
        return [d for s in sorted(m.active_slice_indices) for d in m.slice_to_devices[s]]

    @property
    def active_slice_count(self) -> int:
        return int(self._manager.active_slice_count)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._manager, name)


def fingerprint(batch: Batch) -> int:
    """A 60-bit integer from the bytes of every array leaf: equal batches, equal ids."""
    import jax

    h = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves(batch):
        array = np.asarray(leaf)
        h.update(array.dtype.str.encode() + str(array.shape).encode() + array.tobytes())
    return int(h.hexdigest()[:15], 16)


def load_adapter(spec: str) -> TrainingAdapter:
    """``pkg.module:name`` or ``path/to/file.py:name`` -> the adapter it names."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ChaosConfigError(
            f"--acceptance-adapter={spec!r}: write MODULE:NAME or FILE.py:NAME, for example "
            "pathways_chaos.harness.acceptance.adapter:reference_adapter"
        )
    try:
        obj = load_name(spec, "pathways_chaos_adapter_")
    except (ImportError, AttributeError, OSError) as error:
        raise ChaosConfigError(
            f"--acceptance-adapter={spec!r} cannot be loaded ({type(error).__name__}: {error}): "
            "check the module path and the name after the colon"
        ) from None
    adapter = obj() if callable(obj) and not isinstance(obj, TrainingAdapter) else obj
    if not isinstance(adapter, TrainingAdapter):
        raise ChaosConfigError(
            f"--acceptance-adapter={spec!r} is a {type(adapter).__name__}, not a TrainingAdapter: "
            "wrap your trainer in pathways_chaos.harness.acceptance.adapter.TrainingAdapter"
        )
    return adapter if adapter.source is not None else dataclasses.replace(adapter, source=spec)


# -- the reference trainer, shipped as an adapter ------------------------------------------
def _reference_step(state: State, batch: Batch, lr: float, beta: float) -> tuple[State, Any]:
    from pathways_chaos.harness.reference import model

    return model.train_step(state, batch["x"], batch["y"], lr=lr, beta=beta)


def _reference_iterator(global_batch: int, data: Any) -> DataIterator:
    import grain
    from grain.experimental import ElasticIterator

    iterator: DataIterator = ElasticIterator(
        data.map_dataset(), global_batch, grain.sharding.NoSharding()
    )
    return iterator


def _reference_ids(batch: Batch) -> Any:
    return batch["id"].tolist()


def _reference_mesh(manager: Any) -> Any:
    import jax

    devices = np.asarray(manager.active_devices, dtype=object)
    return jax.sharding.Mesh(devices.reshape(manager.active_slice_count, -1), ("replica", "data"))


def reference_adapter(mode: str = "resize") -> TrainingAdapter:
    """The reference elastic trainer's model, data and mesh, as a team would wrap theirs."""
    from pathways_chaos.harness.reference import model
    from pathways_chaos.harness.reference.data import SyntheticData
    from pathways_chaos.harness.reference.trainer import TrainerConfig

    config = TrainerConfig()
    data = SyntheticData()
    return TrainingAdapter(
        name="reference",
        init_state=functools.partial(model.init_state, config.seed),
        train_step=functools.partial(_reference_step, lr=config.lr, beta=config.beta),
        make_iterator=functools.partial(_reference_iterator, data=data),
        batch_ids=_reference_ids,
        build_mesh=_reference_mesh,
        recovery_mode=mode,
        global_batch=16,
        expected_ids=data.order,
        params=None,
    )
