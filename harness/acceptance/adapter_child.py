"""The team's adapter, loaded and run plainly in a child process: pytest never imports it.

Why: ``--acceptance-adapter`` names the team's code, and code this project did not write never
runs in the process that judges it (an ``os._exit`` at import, a hang in ``init_state``, a
patched library would otherwise end or bend the session). One child loads the adapter, says what
it declares (``AdapterFacts``: its fields, the parameter count of its initial state, the order it
promises) and makes the plain one-device baseline run, whose ids and final state it writes as
files beside its log. The migrated, interrupted and preempted runs are trainer episodes, each in
children of their own, which load the adapter again from its spec (``AdapterBySpec``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from pathways_chaos.harness.acceptance.adapter import AdapterContractError, load_adapter
from pathways_chaos.harness.acceptance.loop import PlainRun
from pathways_chaos.harness.acceptance.table import UserCodeFailed, user_frame
from pathways_chaos.harness.engine.deadline import DEFAULT_WALL_S, Deadline, default_deadline
from pathways_chaos.harness.engine.untrusted_files import load_json
from pathways_chaos.harness.episodes.child import ChildFiles, one_off
from pathways_chaos.harness.episodes.child_watch import one_off_error
from pathways_chaos.harness.episodes.loop_episode import said_at_its_line
from pathways_chaos.harness.errors import ChaosConfigError


@dataclasses.dataclass(frozen=True)
class AdapterBySpec:
    """An adapter as a trainer episode's child gets it: loaded there from its spec (it pickles
    as ``load_adapter(source)``), never here. ``source`` marks it as the team's code."""

    source: str

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (load_adapter, (self.source,))


@dataclasses.dataclass
class AdapterFacts:
    """What the checks read of an adapter, said by its child; its plain run is made by a
    second child the first time a check needs it (manifest rows only need the fields)."""

    source: str
    name: str
    recovery_mode: str
    global_batch: int
    steps: int
    snapshot_interval: int
    params: float | None
    counted_params: float | None  # in the initial state (None: init_state failed)
    workdir: Path
    #: what the plain run's child said: the run, the declared order, or what stopped it
    _plain: tuple[PlainRun | None, list[int] | None, list[Any] | None] | None = None

    def plain_run(self) -> PlainRun:
        """The plain baseline run, or what stopped it: the team's line, or (no line of
        theirs) a bug of ours."""
        plain, _, failed = self._made()
        if plain is not None:
            return plain
        where, message = failed or (None, "the adapter's child made no plain run")
        if where is None:
            raise RuntimeError(f"pathways-chaos failed in the adapter's child: {message}")
        raise UserCodeFailed(str(where), str(message))

    @property
    def expected(self) -> list[int] | None:
        """The order the adapter declares, as long as its plain run's ids (None: none)."""
        return self._made()[1]

    def _made(self) -> tuple[PlainRun | None, list[int] | None, list[Any] | None]:
        if self._plain is None:
            self._plain = _plain_in_child(self.source, self.workdir)
        return self._plain


@dataclasses.dataclass(kw_only=True)
class AdapterChildSpec(ChildFiles):
    adapter_spec: str
    out_dir: str
    plain: bool = False  # False: the adapter's fields; True: its plain one-device run

    def run_in_child(self) -> None:
        one_off(self, lambda recorder: _describe(self, recorder))


def _describe(spec: AdapterChildSpec, recorder: Any) -> None:
    """Loads the adapter and writes ``facts.json`` (or, ``plain``, ``plain.json`` and the
    plain run's files)."""
    try:
        adapter = load_adapter(spec.adapter_spec)
    except ChaosConfigError as error:
        recorder.emit("loop_unloadable", message=str(error))
        return
    except BaseException as error:  # importing the team's module: anything goes
        recorder.emit("loop_unloadable", message=said_at_its_line(error))
        return
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if spec.plain:
        (out / "plain.json").write_text(json.dumps(_plain(adapter, out)))
    else:
        (out / "facts.json").write_text(json.dumps(_fields(adapter)))
    recorder.emit("run_end", run=spec.run, status="completed")


def _fields(adapter: Any) -> dict[str, Any]:
    import jax

    facts: dict[str, Any] = {
        "name": adapter.name,
        "recovery_mode": adapter.recovery_mode,
        "global_batch": adapter.global_batch,
        "steps": adapter.steps,
        "snapshot_interval": adapter.snapshot_interval,
        "params": adapter.params,
        "counted_params": None,
    }
    try:
        state = jax.eval_shape(adapter.init_state)
        facts["counted_params"] = float(sum(int(x.size) for x in jax.tree_util.tree_leaves(state)))
    except Exception:  # init_state raised: the plain run (the rows that need it) says where
        pass
    return facts


def _plain(adapter: Any, out: Path) -> dict[str, Any]:
    from pathways_chaos.harness.acceptance.loop import plain_run
    from pathways_chaos.harness.engine.digest import host_array

    said: dict[str, Any] = {"expected": None, "failed": None, "plain": None}
    try:
        plain = plain_run(adapter)
        if adapter.expected_ids is not None:
            flat = [i for ids in plain.ids for i in ids]
            said["expected"] = [int(i) for i in adapter.expected_ids(len(flat))]
    except (Exception, SystemExit, KeyboardInterrupt) as error:  # the adapter's, at its line
        said["failed"] = _failure(error)
        return said
    files = {}
    for number, (path, value) in enumerate(plain.state.items()):
        # bfloat16 and typed keys as numpy can read them back (float32, exact; key data)
        np.save(out / f"leaf-{number}.npy", host_array(value), allow_pickle=False)
        files[path] = f"leaf-{number}.npy"
    said["plain"] = {"ids": plain.ids, "leaves": files}
    return said


def _failure(error: BaseException) -> list[str | None]:
    said = " ".join(str(error).split())[:300]
    if isinstance(error, AdapterContractError):  # raised by us about what its code returned
        return [error.where, said]
    return [user_frame(error), f"your code raised {type(error).__name__}: {said}"]


def describe_adapter(spec: str, workdir: Path) -> AdapterFacts:
    """The adapter ``spec`` names, as its child found it (its files under ``workdir``, which
    the caller owns); a spec that does not load (or whose module ends its process) is one
    ``ChaosConfigError`` line."""
    found = _in_child(spec, workdir, plain=False)
    facts = load_json(found.read_text(), found, what="adapter facts")
    return AdapterFacts(
        source=spec,
        name=str(facts["name"]),
        recovery_mode=str(facts["recovery_mode"]),
        global_batch=int(facts["global_batch"]),
        steps=int(facts["steps"]),
        snapshot_interval=int(facts["snapshot_interval"]),
        params=None if facts["params"] is None else float(facts["params"]),
        counted_params=facts["counted_params"],
        workdir=workdir,
    )


def _plain_in_child(
    spec: str, workdir: Path
) -> tuple[PlainRun | None, list[int] | None, list[Any] | None]:
    out = _in_child(spec, workdir, plain=True)
    said = load_json(out.read_text(), out, what="adapter run")
    plain = None
    if said.get("plain") is not None:
        state = {
            path: np.load(out.parent / file, mmap_mode="r", allow_pickle=False)
            for path, file in said["plain"]["leaves"].items()
        }
        plain = PlainRun([list(map(int, ids)) for ids in said["plain"]["ids"]], state)
    return plain, said.get("expected"), said.get("failed")


#: Wall seconds an adapter may take to load and build its initial state, unless the session
#: set its own wall deadline: a ``jax.distributed.initialize()`` or a download at import
#: waits forever on one controller, and every row waits on it.
LOADING_WALL_S = 120.0


def _loading_deadline() -> Deadline:
    """The session's deadline, its wall time cut to ``LOADING_WALL_S`` if it is the default."""
    deadline = default_deadline()
    if deadline.wall_s == DEFAULT_WALL_S:
        return dataclasses.replace(deadline, wall_s=LOADING_WALL_S)
    return deadline


def _in_child(spec: str, workdir: Path, *, plain: bool) -> Path:
    """Runs the adapter's child; the JSON file it wrote, or why it wrote none (one line)."""
    from pathways_chaos.harness.episodes.supervised_trainer import child_files

    tag = "plain" if plain else "adapter"
    work = workdir / tag
    work.mkdir(mode=0o700, parents=True, exist_ok=True)
    log, out = work / f"{tag}.jsonl", work / "out"
    files = child_files("1x1", log, work, tag, pickled=False)  # the spec travels as text
    child = AdapterChildSpec(**files, adapter_spec=spec, out_dir=str(out), plain=plain)
    error = one_off_error(child, work, "adapter", None if plain else _loading_deadline())
    written = out / ("plain.json" if plain else "facts.json")
    if error is None and written.is_file():
        return written
    why = " ".join((str(error) if error is not None else "its process wrote nothing").split())
    if plain:  # a row's run: the adapter's own failure, where a row shows it
        raise UserCodeFailed(spec, f"the adapter's plain run: {why}")
    named = f"--acceptance-adapter={spec!r}"
    raise ChaosConfigError(why if why.startswith(named) else f"{named}: {why}")
