"""A mixture is two iterators drawn from in turn, not one replaced by another."""

from __future__ import annotations

from typing import Any

from pathways_chaos.harness.judging.data_sources import Mixture, mixture


def _batches(sources: list[int], ids: list[list[int]]) -> list[dict[str, Any]]:
    return [
        {"kind": "batch", "run": 1, "attempt": 1, "batch": n, "source": s, "ids": i}
        for n, (s, i) in enumerate(zip(sources, ids, strict=True), 1)
    ]


def test_an_iterator_replaced_by_a_new_one_is_no_mixture() -> None:
    """A rebuild after a scale-up draws from a new iterator and never from the old again."""
    events = _batches([0, 0, 1, 1], [[0], [1], [2], [3]])
    assert mixture(events, None) == Mixture(1, False)


def test_two_iterators_in_turn_are_a_mixture_and_shared_ids_are_seen() -> None:
    assert mixture(_batches([0, 1, 0, 1], [[0], [100], [1], [101]]), None) == Mixture(2, False)
    assert mixture(_batches([0, 1, 0, 1], [[0], [0], [1], [1]]), None) == Mixture(2, True)


def test_only_the_trained_batches_count() -> None:
    """An eval iterator drawn between training batches trains nothing: no mixture."""
    events = _batches([0, 1, 0, 1, 0], [[0], [0], [1], [1], [2]])
    assert mixture(events, {(1, 1, 1), (1, 1, 3), (1, 1, 5)}) == Mixture(1, False)


def _placed(source: int, position: int, size: int = 8) -> dict[str, Any]:
    return {"kind": "batch", "run": 1, "attempt": 1, "source": source, "position": position,
            "size": size, "batch": position // size + 1}  # fmt: skip


def test_a_rebuilt_iterator_that_goes_on_from_the_old_position_is_one_source() -> None:
    assert mixture([_placed(0, 0), _placed(0, 8), _placed(1, 16)], None) == Mixture(1, False)


def test_a_warm_up_iterator_then_the_main_one_is_a_mixture() -> None:
    """The main iterator starts at its own position 0, not where the warm-up one stopped."""
    assert mixture([_placed(0, 0), _placed(0, 8), _placed(1, 0)], None).sources == 2


def test_an_iterator_set_to_a_saved_position_before_its_first_batch_is_a_rebuild() -> None:
    """The reference trainer's PerHostIteratorState mutant rebuilds its iterator after a
    scale-up and sets it to a wrong position: a resume bug for the resume judges to name, not
    a mixture (its FAIL once said "the loop trains from several grain iterators in turn")."""
    set_state = {"kind": "iterator_set_state", "run": 1, "attempt": 1, "position": 40}
    rebuilt = [_placed(0, 0), _placed(0, 8), set_state, _placed(1, 40)]
    assert mixture(rebuilt, None) == Mixture(1, False)
    # set before the earlier iterator's last batch, it says nothing about the new one
    early = [_placed(0, 0), set_state, _placed(0, 8), _placed(1, 40)]
    assert mixture(early, None).sources == 2
