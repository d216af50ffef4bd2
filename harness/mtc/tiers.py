"""Where checkpoints live on the fake: a ramdisk per host, peer copies, one backup bucket.

Layout under one root (tmpfs under /dev/shm when writable with 1 GB free, a temp dir otherwise)::

    hosts/<h>/ramdisk/            the host's local checkpoint directory (the job's mount)
    hosts/<h>/peers/<from>/<step> copies of host <from>'s checkpoints, held on host <h>
    bucket/<job>/<step>/n<rank>/  the backup ("GCS"), one folder per node rank
    bucket/<job>/restore.version  pins the step to restore (GKE: "Restore from a specific backup")

Peer copies live under the host that holds them, as they do on GKE (the replicated data sits in
the peer node's ramdisk volume), so losing a node loses its own checkpoints and the copies it
held for others.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

from pathways_chaos.harness.mtc.protocol import (
    CHECKPOINT_METADATA_FILE,
    RESTORE_VERSION_FILE,
    is_complete_step,
)

TIERS = ("ramdisk", "peer", "backup")


@dataclasses.dataclass(frozen=True)
class Inventory:
    """The complete steps each tier holds for each host, at one moment (what an oracle reads)."""

    ramdisk: dict[int, tuple[int, ...]]
    peer: dict[int, tuple[int, ...]]
    backup: dict[int, tuple[int, ...]]
    pinned: int | None

    def to_json(self) -> dict[str, object]:
        return {
            "ramdisk": {str(h): list(s) for h, s in self.ramdisk.items()},
            "peer": {str(h): list(s) for h, s in self.peer.items()},
            "backup": {str(h): list(s) for h, s in self.backup.items()},
            "pinned": self.pinned,
        }


class Tiers:
    """The storage of one fake MTC cluster; a context manager that removes it on exit."""

    def __init__(self, num_hosts: int, job: str, root: str | Path | None = None) -> None:
        self.num_hosts = num_hosts
        self.job = job
        self._own_root = root is None
        if root is None:
            base = "/dev/shm" if _writable_tmpfs("/dev/shm") else None
            root = tempfile.mkdtemp(prefix="chaos-mtc-", dir=base)
        self.root = Path(root)
        self.medium = "tmpfs" if str(self.root).startswith("/dev/shm") else "disk"
        for h in range(num_hosts):
            self.ramdisk(h).mkdir(parents=True, exist_ok=True)
        self.job_bucket.mkdir(parents=True, exist_ok=True)

    def __enter__(self) -> Tiers:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- paths ---------------------------------------------------------------------------------
    def host_dir(self, host: int) -> Path:
        return self.root / "hosts" / str(host)

    def ramdisk(self, host: int) -> Path:
        return self.host_dir(host) / "ramdisk"

    def peer_store(self, holder: int, owner: int) -> Path:
        return self.host_dir(holder) / "peers" / str(owner)

    @property
    def bucket(self) -> Path:
        return self.root / "bucket"

    @property
    def job_bucket(self) -> Path:
        return self.bucket / self.job

    def backup_dir(self, step: int, host: int) -> Path:
        return self.job_bucket / str(step) / f"n{host}"

    @property
    def restore_version(self) -> Path:
        return self.job_bucket / RESTORE_VERSION_FILE

    # -- what is held --------------------------------------------------------------------------
    def local_steps(self, host: int) -> list[int]:
        return _complete_steps(self.ramdisk(host))

    def peer_copies(self, owner: int) -> dict[int, list[int]]:
        """Holder host -> complete steps of ``owner`` it holds."""
        out = {}
        for holder in range(self.num_hosts):
            if holder != owner:
                steps = _complete_steps(self.peer_store(holder, owner))
                if steps:
                    out[holder] = steps
        return out

    def backup_steps(self, host: int) -> list[int]:
        if not self.job_bucket.is_dir():
            return []
        return sorted(
            int(p.name)
            for p in self.job_bucket.iterdir()
            if p.name.isdigit() and _holds_checkpoint(self.backup_dir(int(p.name), host))
        )

    def pinned_version(self) -> int | None:
        try:
            return int(self.restore_version.read_text().strip())
        except (OSError, ValueError):
            return None

    def inventory(self) -> Inventory:
        hosts = range(self.num_hosts)
        return Inventory(
            ramdisk={h: tuple(self.local_steps(h)) for h in hosts},
            peer={
                h: tuple(sorted({s for v in self.peer_copies(h).values() for s in v}))
                for h in hosts
            },
            backup={h: tuple(self.backup_steps(h)) for h in hosts},
            pinned=self.pinned_version(),
        )

    # -- what faults do ------------------------------------------------------------------------
    def wipe_host(self, host: int) -> list[str]:
        """The node and its ramdisk volume are gone: own checkpoints and the peer copies it held."""
        target = self.host_dir(host)
        touched = [
            str(p) for p in sorted(target.rglob("*")) if p.parent.name in ("ramdisk", "peers")
        ]
        shutil.rmtree(target, ignore_errors=True)
        self.ramdisk(host).mkdir(parents=True, exist_ok=True)
        return touched or [f"{target} (empty)"]

    def drop_peer_copies(self, owner: int) -> list[str]:
        """Every copy of ``owner``'s checkpoints that other hosts hold is gone."""
        touched = []
        for holder in range(self.num_hosts):
            store = self.peer_store(holder, owner)
            if store.exists():
                touched.append(str(store))
                shutil.rmtree(store, ignore_errors=True)
        return touched

    def pin(self, step: int) -> list[str]:
        self.restore_version.write_text(f"{step}\n")
        return [f"{self.restore_version} = {step}"]

    def write_torn_step(self, host: int, step: int) -> list[str]:
        """What a crash in the middle of a local save leaves: Orbax's temporary step folder."""
        torn = self.ramdisk(host) / f"{step}.orbax-checkpoint-tmp-0"
        (torn / "state").mkdir(parents=True, exist_ok=True)
        (torn / "state" / "_METADATA").write_text("{")  # cut off mid-write
        return [str(torn)]


def copy_step(src: Path, dst: Path) -> None:
    """Copies a step folder (following a restore link) atomically: into a temp name, then rename."""
    tmp = dst.parent / f".{dst.name}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, tmp, symlinks=False)
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(dst)
    os.replace(tmp, dst)


def _holds_checkpoint(path: Path) -> bool:
    return path.is_dir() and (path / CHECKPOINT_METADATA_FILE).is_file()


def _complete_steps(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if is_complete_step(p))


#: Below this much free space a tmpfs is not used (Docker's default /dev/shm is 64 MB).
MIN_TMPFS_FREE = 1 << 30


def _writable_tmpfs(path: str) -> bool:
    return (
        os.path.isdir(path)
        and os.access(path, os.W_OK)
        and shutil.disk_usage(path).free >= MIN_TMPFS_FREE
    )
