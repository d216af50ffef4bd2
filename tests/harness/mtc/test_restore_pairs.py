"""The MTC checks that pair each restore with the save of its step: a host whose restore differs
is named, and a restore of a step no save completed is left to the completeness check."""

from __future__ import annotations

from typing import Any

from pathways_chaos.harness.mtc.judging import check_bitwise, check_data_position


def _events(host_digests: list[str], host_data_index: list[int]) -> list[dict[str, Any]]:
    return [
        {"kind": "checkpoint_save", "step": 3, "digest": "old", "data_index": 20},
        {"kind": "checkpoint_save", "step": 3, "digest": "a", "data_index": 30},
        {"kind": "restore_end", "attempt": 2, "step": 7, "digest": "z", "data_index": 70},
        {
            "kind": "restore_end",
            "attempt": 2,
            "step": 3,
            "digest": "a",
            "host_digests": host_digests,
            "data_index": 30,
            "host_data_index": host_data_index,
        },
    ]


def test_each_host_restore_is_compared_with_the_newest_save_of_its_step() -> None:
    assert check_bitwise(_events(["a", "a"], [30, 30])) == []
    assert check_data_position(_events(["a", "a"], [30, 30])) == []
    assert check_bitwise(_events(["a", "old"], [30, 30])) == [
        "attempt 2: host 1's restore of step 3 is not bitwise the saved state"
    ]
    (moved,) = check_data_position(_events(["a", "a"], [30, 20]))
    assert "restored the model of step 3 with data position 30 (hosts [30, 20])" in moved
