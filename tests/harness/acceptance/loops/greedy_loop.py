"""A port whose elastic_retry waits for 5 slices: on the 4-slice fake (or a 4-slice JobSet)
the wait can never be met, so the run must end at once saying so, not hang."""

from typing import Any


def main(devices: Any = None) -> int:
    from pathwaysutils.elastic import manager as manager_lib

    elastic_manager = manager_lib.Manager(devices)

    @elastic_manager.elastic_retry(
        minimum_slice_count=5, retry_policy=manager_lib.ElasticRetryLimit(3)
    )
    def run() -> int:
        return 0

    return run()
