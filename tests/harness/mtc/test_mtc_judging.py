"""The expected restore, worked out from a tier inventory by the reference document's rules."""

from __future__ import annotations

from pathways_chaos.harness.mtc.judging import expected_restore


def _inventory(ramdisk, peer, backup, pinned=None):
    def per_host(v):
        return {str(h): s for h, s in enumerate(v)}

    return {
        "ramdisk": per_host(ramdisk),
        "peer": per_host(peer),
        "backup": per_host(backup),
        "pinned": pinned,
    }


def test_the_newest_step_every_host_can_get_wins_each_from_its_fastest_tier():
    inv = _inventory(ramdisk=[[5, 10], [], [10]], peer=[[], [10], []], backup=[[1], [1], [1]])
    assert expected_restore(inv, [0, 1, 2]) == (10, {0: "ramdisk", 1: "peer", 2: "ramdisk"})


def test_a_step_one_host_cannot_get_is_passed_over():
    inv = _inventory(ramdisk=[[5, 10], [5], [10]], peer=[[], [], [5]], backup=[[], [], []])
    assert expected_restore(inv, [0, 1, 2]) == (5, {0: "ramdisk", 1: "ramdisk", 2: "peer"})


def test_a_pin_wins_over_newer_copies_and_comes_from_the_backup():
    inv = _inventory(ramdisk=[[15], [15]], peer=[[15], [15]], backup=[[1, 10], [1, 10]], pinned=1)
    assert expected_restore(inv, [0, 1]) == (1, {0: "backup", 1: "backup"})


def test_nothing_held_means_starting_over():
    assert expected_restore(_inventory([[], []], [[], []], [[], [1]]), [0, 1]) == (None, {})
