"""The chain of steps a loop's final state was trained on, rebuilt from the lineage events.

Jepsen's checkers reason over the whole history of operations; this does the same for a training
loop. Starting from the nodes of the state ``main`` returned, it walks back through every
execution that produced them, every copy, and every restore (to the leaves the restored snapshot
was saved from, in an earlier attempt), and collects the batch draws whose buffers fed those
executions. The judges (``chain_judges``) then ask of that chain, not of what the loop merely
drew: was each sample trained exactly once and in the fault-free order, did each snapshot pair
the model with the data position after the last batch that model saw, did the state trained
after a restore come from it, did a rejoined slice come back into the mesh, was a slice error
swallowed.

Where the chain cannot be followed (the state went through the host, or batches reach the
devices through host code the seam cannot link), the judges say "not judged: the chain breaks at
..." and the draw-based checks stand in, never a silent pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from pathways_chaos.harness.engine.recorder import Event

SAVE_KINDS = ("snapshot_save", "checkpoint_save")


@dataclasses.dataclass(frozen=True)
class Draw:
    """One batch drawn from the loop's iterator (``batch=N`` counts these)."""

    number: int
    run: int
    attempt: int
    position: int | None
    size: int | None
    ids: tuple[int, ...] | None
    seq: int

    @property
    def samples(self) -> list[int]:
        """Sample ids when the records carry them, else global data positions."""
        if self.ids is not None:
            return list(self.ids)
        if self.position is None or self.size is None:
            return []
        return list(range(self.position, self.position + self.size))

    def label(self) -> str:
        return f"batch #{self.number} (run {self.run} attempt {self.attempt})"


@dataclasses.dataclass
class Graph:
    """Nodes (arrays), where each came from, and the executions between them."""

    origin: dict[int, tuple[Any, ...]] = dataclasses.field(default_factory=dict)
    execs: dict[int, Event] = dataclasses.field(default_factory=dict)
    draws: dict[int, Draw] = dataclasses.field(default_factory=dict)
    saves: list[Event] = dataclasses.field(default_factory=list)
    restores: list[Event] = dataclasses.field(default_factory=list)
    final: dict[str, int | None] | None = None
    #: Nodes placed from host values, by the (run, attempt) that placed them.
    from_host: dict[int, tuple[int, int]] = dataclasses.field(default_factory=dict)
    #: ... and the seq of the event that placed them.
    from_host_seq: dict[int, int] = dataclasses.field(default_factory=dict)
    recorded: bool = False  # the episode ran with the lineage seam
    events: Sequence[Event] = ()

    @classmethod
    def from_events(cls, events: Sequence[Event]) -> Graph:
        g = cls(events=events)
        for e in events:
            kind = e["kind"]
            if kind == "exec":
                g.recorded = True
                g.execs[e["n"]] = e
                for node in e["outputs"]:
                    g.origin[node] = ("exec", e["n"])
            elif kind == "placed":
                g.recorded = True
                source = e["source"]
                if source == "batch":
                    g.origin[e["node"]] = ("batch", e["batch"])
                elif source == "array":
                    g.origin[e["node"]] = ("copy", e["src"])
                else:
                    g.origin[e["node"]] = (source,)
                    if source == "host":
                        g.from_host[e["node"]] = (e.get("run", 0), e.get("attempt", 0))
                        g.from_host_seq[e["node"]] = e["seq"]
            elif kind == "batch":
                ids = tuple(e["ids"]) if e.get("ids") is not None else None
                g.draws[e["batch"]] = Draw(
                    e["batch"], e["run"], e["attempt"], e["position"], e["size"], ids, e["seq"]
                )
            elif kind in SAVE_KINDS and not e.get("skipped") and e.get("nodes") is not None:
                g.saves.append(e)
            elif kind == "restore_end" and e.get("nodes") is not None:
                g.restores.append(e)
                for path, node in e["nodes"].items():
                    g.origin[node] = ("restore", len(g.restores) - 1, path)
            elif kind == "run_end" and e.get("final_nodes") is not None:
                g.final = e["final_nodes"]
        return g

    def saved_for(self, restore: Event) -> Event | None:
        return saved_for(self.saves, restore)


def saved_for(saves: Sequence[Event], restore: Event) -> Event | None:
    """The save a restore brought back: the last one of its step and kind before it."""
    kind = "checkpoint_save" if restore.get("source") == "checkpoint" else "snapshot_save"
    step, seq = restore.get("step"), restore["seq"]
    earlier = [s for s in saves if s["kind"] == kind and s.get("step") == step and s["seq"] < seq]
    return earlier[-1] if earlier else None


@dataclasses.dataclass
class Walk:
    """What one walk back from a set of nodes reached."""

    execs: set[int] = dataclasses.field(default_factory=set)
    consumed: dict[int, int] = dataclasses.field(default_factory=dict)  # draw -> first exec
    restores: dict[int, set[str]] = dataclasses.field(default_factory=dict)  # used paths
    breaks: list[str] = dataclasses.field(default_factory=list)
    nodes: set[int] = dataclasses.field(default_factory=set)

    def trained(self, graph: Graph) -> list[Draw]:
        """The draws the walked state was trained on, in the order they were trained."""
        order = sorted(self.consumed.items(), key=lambda item: (item[1], item[0]))
        return [graph.draws[d] for d, _ in order if d in graph.draws]


def walk_back(graph: Graph, start: Iterable[int]) -> Walk:
    """Every execution, batch and restore behind ``start``, across restores and attempts."""
    walk = Walk()
    stack = list(start)
    while stack:
        node = stack.pop()
        if node in walk.nodes:
            continue
        walk.nodes.add(node)
        origin = graph.origin.get(node)
        if origin is None:
            continue
        if origin[0] == "exec":
            n = origin[1]
            if n in walk.execs:
                continue
            walk.execs.add(n)
            for inp in graph.execs[n]["inputs"]:
                draw = batch_root(graph, inp)
                if draw is not None and (draw not in walk.consumed or n < walk.consumed[draw]):
                    walk.consumed[draw] = n
                stack.append(inp)
        elif origin[0] == "copy":
            stack.append(origin[1])
        elif origin[0] == "restore":
            index, path = origin[1], origin[2]
            walk.restores.setdefault(index, set()).add(path)
            restore = graph.restores[index]
            save = graph.saved_for(restore)
            parent = None if save is None else (save.get("nodes") or {}).get(path)
            if parent is None:
                walk.breaks.append(
                    f"the restore of step {restore.get('step')} (run {restore['run']} attempt "
                    f"{restore['attempt']}): leaf {path} was not among the saved leaves seen"
                )
            else:
                stack.append(parent)
    return walk


def put_back_from_host(
    graph: Graph, walk: Walk, recovered: frozenset[tuple[int, int]] = frozenset()
) -> str:
    """Where the final state's chain starts again from host values in a later attempt that
    restored nothing the observer saw, yet drew its first batch past the data's start: the
    loop brought its state back by a path the seam cannot follow (a host copy put back with
    ``device_put``), so the chain breaks there; "" when it does not. An attempt that starts
    over from its initial values draws from the start and is followed as a start-over. (The
    draws alone say less: ``loop_lineage.restored_unseen``, for when the chain is not followed.)
    ``recovered``: attempts that put it back after catching a slice-down error themselves
    (``recovered_from_host``), said first."""
    if recovered:  # a hand-written retry (no new attempt) that put its state back from host
        run, attempt = min(recovered)
        return (
            f"run {run} attempt {attempt} caught a slice-down error and put its "
            "state back from host values (not a Snapshotter or checkpoint load the "
            "observer sees), so the chain of trained steps breaks there"
        )
    restored = {(r["run"], r["attempt"]) for r in graph.restores}
    first: dict[tuple[int, int], Draw] = {}
    for draw in sorted(graph.draws.values(), key=lambda d: d.seq):
        first.setdefault((draw.run, draw.attempt), draw)
    for node in sorted(walk.nodes):
        where = graph.from_host.get(node)
        if where is None or where in restored or (where[1] <= 1 and where[0] <= 1):
            continue
        drawn = first.get(where)
        if drawn is not None and drawn.position:
            return (
                f"run {where[0]} attempt {where[1]} put its state back from host values (not "
                "a Snapshotter or checkpoint load the observer sees) and drew its first batch "
                f"at data position {drawn.position}, so the chain of trained steps breaks there"
            )
    return ""


def recovered_from_host(graph: Graph, walk: Walk) -> frozenset[tuple[int, int]]:
    """Attempts whose loop caught a slice-down error and then put the state the final one
    comes from back from host values: a recovery of its own the seam cannot follow."""
    caught = caught_slice_errors(graph.events)
    return frozenset(
        where
        for node in walk.nodes
        if (where := graph.from_host.get(node)) is not None
        and any(key == where and seq < graph.from_host_seq.get(node, -1) for key, seq in caught)
    )


def caught_slice_errors(events: Sequence[Event]) -> list[tuple[tuple[int, int], int]]:
    """Each slice-down error the loop's own ``except`` caught: the (run, attempt) it was
    raised in and the seq of its ``slice_error``."""
    raised = {
        e["number"]: ((e.get("run", 0), e.get("attempt", 0)), e["seq"])
        for e in events
        if e["kind"] == "slice_error" and "number" in e
    }
    return [
        raised[e["number"]]
        for e in events
        if e["kind"] == "slice_error_caught" and e.get("number") in raised
    ]


def batch_root(graph: Graph, node: int) -> int | None:
    seen = 0
    origin = graph.origin.get(node)
    while origin is not None and origin[0] == "copy" and seen < 64:
        origin = graph.origin.get(origin[1])
        seen += 1
    if origin is not None and origin[0] == "batch":
        return int(origin[1])
    return None


@dataclasses.dataclass
class Chain:
    """The final state's chain, or why it could not be followed."""

    graph: Graph
    walk: Walk | None
    why_not: str = ""
    #: Attempts that caught a slice-down error and put their state back from host values.
    put_back: frozenset[tuple[int, int]] = frozenset()

    @property
    def followed(self) -> bool:
        return self.walk is not None

    @property
    def trained(self) -> list[Draw]:
        return [] if self.walk is None else self.walk.trained(self.graph)


def follow(events: Sequence[Event] | None) -> Chain:
    graph = Graph.from_events(events or [])
    failed = next((e for e in events or [] if e["kind"] == "lineage_failed"), None)
    if failed is not None:
        return Chain(
            graph, None, f"the lineage seam failed (bug in pathways-chaos): {failed['error']}"
        )
    if not graph.recorded:
        return Chain(graph, None, "the episode ran without the lineage seam")
    if graph.final is None:
        return Chain(graph, None, "the loop returned no state to trace (return the final state)")
    start = [n for n in graph.final.values() if n is not None]
    if not start:
        return Chain(
            graph,
            None,
            "the state main returned was never seen on a device (it was built on the host, "
            "not fetched with jax.device_get or np.asarray from the trained arrays)",
        )
    walk = walk_back(graph, start)
    if walk.breaks:
        return Chain(graph, None, walk.breaks[0])
    recovered = recovered_from_host(graph, walk)
    from_host = put_back_from_host(graph, walk, recovered)
    if from_host:
        return Chain(graph, None, from_host, recovered)
    if not walk.consumed:
        if graph.draws:
            return Chain(
                graph,
                None,
                "no drawn batch reaches the final state through a placement the observer can "
                "follow (the batches are rebuilt on the host before they are placed)",
            )
        return Chain(graph, None, "the loop drew no batch the observer can see")
    return Chain(graph, walk)
