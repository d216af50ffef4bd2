"""The emulated service against the real client's file-protocol functions (Orbax 0.12.8)."""

from __future__ import annotations

import logging

import pytest
from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import (
    initialization as client,
)

from pathways_chaos.harness.mtc.protocol import ReplicatorConfig
from pathways_chaos.harness.mtc.service import ReplicationService
from pathways_chaos.harness.mtc.tiers import Tiers

JOB = "job"
HOSTS = 4


@pytest.fixture
def service(tmp_path):
    with Tiers(HOSTS, JOB, tmp_path) as tiers:
        yield ReplicationService(tiers)  # pumped by hand: no thread


def ask(service, hosts=range(HOSTS), interval_steps=10):
    """Every node writes replicator.yaml with the real client function; the service answers."""
    for h in hosts:
        client._create_replicator_file(
            service.tiers.ramdisk(h),
            run_name=JOB,
            num_nodes=HOSTS,
            data_parallelism=HOSTS,
            node_rank=h,
            peer_ranks=[p for p in range(HOSTS) if p != h],
            backup_interval_minutes=None,
            backup_interval_steps=interval_steps,
        )
    service.pump()


def finish(service, h):
    """The client's side after the service answered: errors, then the restore marker."""
    client._wait_for_replicator_file_to_disappear(service.tiers.ramdisk(h), timeout_seconds=1)
    return client._block_and_process_restore_dir(service.tiers.ramdisk(h), timeout_seconds=1)


def save(service, step, hosts=range(HOSTS)):
    for h in hosts:
        folder = service.tiers.ramdisk(h) / str(step)
        (folder / "state").mkdir(parents=True)
        (folder / "state" / "data").write_bytes(bytes([h, step]) * 100)
        (folder / "_CHECKPOINT_METADATA").write_text("{}")
    service.pump()


def test_the_service_reads_what_the_real_client_writes(service):
    client._create_replicator_file(
        service.tiers.ramdisk(2),
        run_name=JOB,
        num_nodes=4,
        data_parallelism=4,
        node_rank=2,
        peer_ranks=[0, 1, 3],
        backup_interval_minutes=30,
        backup_interval_steps=None,
    )
    config = ReplicatorConfig.parse((service.tiers.ramdisk(2) / "replicator.yaml").read_text())
    assert config == ReplicatorConfig(JOB, "orbax", 4, 2, 4, (0, 1, 3), 30, None)


def test_it_waits_for_every_node_before_answering(service):
    ask(service, hosts=[0, 1])
    assert (service.tiers.ramdisk(0) / "replicator.yaml").exists()
    ask(service, hosts=[2, 3])
    assert not any((service.tiers.ramdisk(h) / "replicator.yaml").exists() for h in range(HOSTS))


def test_no_checkpoint_is_a_zero_sized_step_0_marker_the_client_removes(service):
    ask(service)
    assert [p.name for p in service.tiers.ramdisk(1).glob("*.restore")] == ["job-s0-n1-w0.restore"]
    assert finish(service, 1)
    assert not list(service.tiers.ramdisk(1).glob("*.restore"))


def test_a_lost_host_gets_its_step_from_the_peer_copy_the_client_renames(service):
    ask(service)
    for h in range(HOSTS):
        finish(service, h)
    save(service, 5)
    save(service, 10)
    assert service.tiers.peer_copies(1) == {2: [5, 10]}  # ring: host 1 -> host 2
    service.tiers.wipe_host(1)

    ask(service)
    for h in range(HOSTS):
        assert finish(service, h)
    (plan,) = [p for p in service.plans if p.step is not None]
    assert plan.step == 10 and {h: s.tier for h, s in plan.sources.items()} == {
        0: "ramdisk",
        1: "peer",
        2: "ramdisk",
        3: "ramdisk",
    }
    restored = service.tiers.ramdisk(1) / "10" / "state" / "data"
    assert restored.read_bytes() == bytes([1, 10]) * 100


def test_a_newer_step_some_host_lacks_is_not_restored(service):
    ask(service)
    save(service, 5)
    save(service, 10, hosts=[0, 2, 3])  # host 1 never finished step 10
    service.tiers.drop_peer_copies(1)
    ask(service)
    assert service.plans[-1].step == 5
    assert finish(service, 0) and (service.tiers.ramdisk(0) / "5").is_dir()
    assert not (service.tiers.ramdisk(0) / "10").exists()  # Orbax must not see it as latest


def test_a_fatal_failure_is_raised_by_the_client(service):
    service.fail_next("disk on fire")
    ask(service)
    with pytest.raises(RuntimeError, match="Replicator fatal errors: disk on fire"):
        client._wait_for_replicator_file_to_disappear(service.tiers.ramdisk(0), timeout_seconds=1)
    assert not (service.tiers.ramdisk(0) / "replicator.failed").exists()  # consumed


def test_recoverable_errors_are_logged_and_the_restore_goes_on(service, caplog):
    service.fail_next("slow bucket", fatal=False)
    ask(service)
    with caplog.at_level(logging.ERROR):
        assert finish(service, 3)
    assert "Replicator errors: slow bucket" in caplog.text


def test_restore_version_pins_a_backup_step_once(service):
    ask(service)
    save(service, 1)  # the first complete step is always backed up
    save(service, 5)
    service.tiers.pin(1)
    ask(service)
    assert service.plans[-1].step == 1 and service.plans[-1].pinned
    assert not service.tiers.restore_version.exists()
    assert (service.tiers.job_bucket / "restore.version.applied").exists()


def test_a_pin_the_backup_lacks_fails_with_the_fix(service):
    ask(service)
    save(service, 1)
    service.tiers.pin(7)
    ask(service)
    with pytest.raises(
        RuntimeError, match=r"pins step 7.*remove restore.version or pin one of \[1\]"
    ):
        client._wait_for_replicator_file_to_disappear(service.tiers.ramdisk(0), timeout_seconds=1)


def test_backups_follow_the_step_interval_and_old_local_steps_are_collected(service):
    ask(service, interval_steps=10)
    for step in (1, 5, 10, 15, 20):
        save(service, step)
    assert service.backups == [1, 10, 20]
    assert service.tiers.local_steps(0) == [15, 20]  # two kept per ramdisk


def test_jax_init_info_is_what_the_real_client_reads(service):
    assert client._retrieve_jax_init_info(service.tiers.ramdisk(3), timeout_seconds=1) == [
        "3",
        "127.0.0.1:8476",
    ]


def test_a_minutes_interval_backs_up_once_per_window_of_the_cluster_clock(tmp_path):
    from pathways_chaos.harness.engine.clock import FakeClock

    clock = FakeClock()
    with Tiers(HOSTS, JOB, tmp_path) as tiers:
        service = ReplicationService(tiers, clock=clock)
        for h in range(HOSTS):
            client._create_replicator_file(
                tiers.ramdisk(h),
                run_name=JOB,
                num_nodes=HOSTS,
                data_parallelism=HOSTS,
                node_rank=h,
                peer_ranks=[p for p in range(HOSTS) if p != h],
                backup_interval_minutes=1,
                backup_interval_steps=None,
            )
        service.pump()
        for step, at in ((1, 0), (5, 30), (10, 61), (15, 100), (20, 125)):
            clock.advance(at - clock.time())
            save(service, step)
        assert service.backups == [1, 10, 20]  # windows [0, 60), [60, 120), [120, 180)
