"""The file protocol between Orbax's MTC client and the replication service, in one place.

The names come from ``orbax.checkpoint.experimental.emergency.multi_tier_checkpointing.
initialization`` (0.12.8), which is the client's side of the seam; they are read from that
module when it imports, so a renamed file in a later Orbax fails here, loudly, not silently.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from pathways_chaos.harness.errors import ChaosConfigError

REPLICATOR_FILE = "replicator.yaml"
REPLICATOR_TMP_FILE = "replicator.yaml.tmp"
ERRORS_FILE = "replicator.errors"
FAILED_FILE = "replicator.failed"
JAX_INIT_INFO_FILE = "jax-init-info.txt"
#: In the job's backup directory: pins the step to restore (GKE "Restore from a specific backup").
RESTORE_VERSION_FILE = "restore.version"
RESTORE_MARKER_RE = re.compile(
    r"^(?P<job>.+)-s(?P<step>\d+)-n(?P<node>\d+)-w(?P<worker>\d+)\.restore$"
)
#: Orbax writes a step into ``<step>.orbax-checkpoint-tmp-<n>`` and renames it when complete;
#: a finalised step directory holds this file (orbax.checkpoint._src.metadata.checkpoint).
CHECKPOINT_METADATA_FILE = "_CHECKPOINT_METADATA"


def check_against_client() -> None:
    """Refuses to run if the installed Orbax client names its files differently."""
    from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import (
        initialization as init,
    )

    ours = {
        "_REPLICATOR_FILE": REPLICATOR_FILE,
        "_TEMP_REPLICATOR_FILE_NAME": REPLICATOR_TMP_FILE,
        "_REPLICATOR_ERRORS_FILE": ERRORS_FILE,
        "_REPLICATOR_FAILED_FILE": FAILED_FILE,
        "_JAX_INIT_INFO_FILE": JAX_INIT_INFO_FILE,
    }
    for name, value in ours.items():
        theirs = getattr(init, name, None)
        if theirs != value:
            raise ChaosConfigError(
                f"the installed Orbax MTC client names {name}={theirs!r}, the emulated service "
                f"expects {value!r}: pin orbax-checkpoint==0.12.8 or update harness/mtc/protocol.py"
            )


@dataclasses.dataclass(frozen=True)
class ReplicatorConfig:
    """What one node's ``replicator.yaml`` says (``initialization._create_replicator_file``)."""

    job_name: str
    framework: str
    data_parallelism: int
    node_rank: int
    nodes: int
    peer_ranks: tuple[int, ...]
    backup_interval_minutes: int | None
    backup_interval_steps: int | None

    @classmethod
    def parse(cls, text: str) -> ReplicatorConfig:
        import yaml

        try:
            raw: dict[str, Any] = yaml.safe_load(text) or {}
            return cls(
                job_name=str(raw["job-name"]),
                framework=str(raw.get("framework", "")),
                data_parallelism=int(raw["assume-data-parallelism"]),
                node_rank=int(raw["node-rank"]),
                nodes=int(raw["nodes"]),
                peer_ranks=tuple(int(r) for r in raw.get("peer-ranks") or ()),
                backup_interval_minutes=_optional_int(raw.get("backup-interval-minutes")),
                backup_interval_steps=_optional_int(raw.get("backup-interval-steps")),
            )
        except (KeyError, TypeError, ValueError, yaml.YAMLError) as error:
            raise ValueError(f"unreadable {REPLICATOR_FILE}: {error!r}") from None

    def validate(self) -> None:
        if self.nodes <= 0 or not 0 <= self.node_rank < self.nodes:
            raise ValueError(f"node-rank {self.node_rank} does not fit nodes={self.nodes}")
        if any(not 0 <= r < self.nodes or r == self.node_rank for r in self.peer_ranks):
            raise ValueError(f"peer-ranks {list(self.peer_ranks)} do not fit nodes={self.nodes}")
        if (self.backup_interval_minutes is None) == (self.backup_interval_steps is None):
            raise ValueError("exactly one of backup-interval-minutes/-steps must be set")


def marker_name(job: str, step: int, node: int, worker: int) -> str:
    """``{job}-s{step}-n{node}-w{worker}.restore`` (``initialization._extract_step``)."""
    return f"{job}-s{step}-n{node}-w{worker}.restore"


def is_complete_step(path: Path) -> bool:
    """A finalised Orbax step: a numeric directory (or link to one) holding its metadata file."""
    return path.name.isdigit() and path.is_dir() and (path / CHECKPOINT_METADATA_FILE).is_file()


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)
