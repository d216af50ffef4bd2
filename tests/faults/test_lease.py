"""A session that stalls past its Lease while another takes it over stops injecting (issue 25).

On the real local API server: session A holds the Lease and fences its journal with it; A's
renewals stop (as under SIGSTOP or a long GC), the Lease expires, session B takes it. When A
wakes and injects, the fence refuses before anything is journalled or changed. The broken
variant (no fence) must fail the same assertions: A then cordons B's JobSet.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from pathways_chaos.faults.journal import RollbackJournal
from pathways_chaos.faults.kubernetes import CordonNodes
from pathways_chaos.faults.lease import LeaseLost, TargetLease
from pathways_chaos.fixtures.control_plane import wait_for
from pathways_chaos.fixtures.kubernetes.pathways_jobset import PathwaysWorkload

pytestmark = pytest.mark.kube


def stall(lease: TargetLease) -> None:
    """Stops the renewals, as a SIGSTOP would, and waits out the Lease."""
    lease._stop.set()
    if lease._thread is not None:
        lease._thread.join(timeout=5)
    time.sleep(lease.duration_s + 0.2)


@pytest.mark.parametrize("broken", [False, True], ids=["shipped", "broken-variant"])
def test_a_session_that_lost_its_lease_stops_injecting(
    pathways_workload: PathwaysWorkload, make_kube_target: Any, tmp_path: Path, broken: bool
) -> None:
    workload = pathways_workload
    api = workload.api_client
    core: Any = client.CoreV1Api(api)
    folder = tmp_path / "j"
    folder.mkdir(mode=0o700)
    journal = RollbackJournal(folder / "a.jsonl")
    target = make_kube_target(workload, armed=True, journal=journal)
    first = TargetLease(api, workload.namespace, workload.jobset, "session-a", duration_s=1)
    second = TargetLease(api, workload.namespace, workload.jobset, "session-b", duration_s=30)
    first.__enter__()
    try:
        if not broken:
            journal.fence = first.check_held
        stall(first)
        second.__enter__()  # the Lease expired: B takes it over
        try:
            refusal: list[str] = []
            try:
                CordonNodes(slice=0).inject(target)
            except LeaseLost as error:
                refusal.append(str(error))

            def check() -> None:
                assert refusal and "taken over by" in refusal[0] and "session-b" in refusal[0]
                names = workload.node_names[workload.pool(0)]
                assert not any(core.read_node(n).spec.unschedulable for n in names)
                assert journal.pending() == []  # refused before it was even journalled

            if broken:
                with pytest.raises(AssertionError):
                    check()
            else:
                check()
        finally:
            journal.replay(api)
            second.__exit__(None, None, None)
    finally:
        first.release()


def test_a_stalled_lease_nobody_took_is_renewed_by_the_fence_and_injection_goes_on(
    pathways_workload: PathwaysWorkload, make_kube_target: Any, tmp_path: Path
) -> None:
    """Expired is not lost: nobody wrote the Lease since, so the fence renews it and goes on."""
    workload = pathways_workload
    api = workload.api_client
    folder = tmp_path / "j"
    folder.mkdir(mode=0o700)
    journal = RollbackJournal(folder / "a.jsonl")
    target = make_kube_target(workload, armed=True, journal=journal)
    lease = TargetLease(api, workload.namespace, workload.jobset, "session-a", duration_s=1)
    lease.__enter__()
    try:
        journal.fence = lease.check_held
        stall(lease)
        assert CordonNodes(slice=0).inject(target)
        coordination: Any = client.CoordinationV1Api(api)
        held = coordination.read_namespaced_lease(lease.name, workload.namespace)
        assert held.spec.holder_identity == lease.holder
        wait_for(lambda: journal.replay(api).ok)
    finally:
        lease.release()


# -- a rollback interrupted by an API outage ---------------------------------------------------


class Outage:
    """Every request of one ApiClient refused at the socket while ``down`` (an API outage).

    The client's own transport is wrapped (its ``rest_client.request``), so what fails is
    what a dropped connection raises; the server itself stays up for the test's own reads.
    """

    def __init__(self, api: Any) -> None:
        self.down = False
        self._request = api.rest_client.request

        def request(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                raise ConnectionRefusedError(111, "Connection refused (API outage)")
            return self._request(*args, **kwargs)

        api.rest_client.request = request


@pytest.mark.parametrize("broken", [False, True], ids=["shipped", "broken-variant"])
def test_the_guards_rollback_rides_out_a_short_api_outage(
    pathways_workload: PathwaysWorkload,
    make_kube_target: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    broken: bool,
) -> None:
    """The API is gone for 2 s as the block ends: the guard retries and restores every Node."""
    import threading

    from pathways_chaos.faults import journal as journal_module

    workload = pathways_workload
    api = workload.api_client
    core: Any = client.CoreV1Api(api)
    folder = tmp_path / "j"
    folder.mkdir(mode=0o700)
    journal = RollbackJournal(folder / "a.jsonl")
    target = make_kube_target(workload, armed=True, journal=journal)
    outage = Outage(api)
    if broken:  # the old guard: one try
        monkeypatch.setattr(journal_module, "ROLLBACK_RETRY_DELAYS", ())
    back = threading.Timer(2.0, lambda: setattr(outage, "down", False))
    crashed: list[BaseException] = []
    try:
        with journal.guard(api):
            CordonNodes(slice=0).inject(target)
            outage.down = True
            back.start()
    except Exception as error:
        crashed.append(error)
    finally:
        back.join()
    err = capsys.readouterr().err

    def check() -> None:
        assert not crashed and "Traceback" not in err
        assert journal.pending() == []
        names = workload.node_names[workload.pool(0)]
        assert not any(core.read_node(n).spec.unschedulable for n in names)

    if broken:
        with pytest.raises(AssertionError):
            check()
        journal.replay(api)
    else:
        check()


def test_an_outage_longer_than_the_retries_ends_in_one_line_naming_what_is_left(
    pathways_workload: PathwaysWorkload,
    make_kube_target: Any,
    kube_control_plane: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pathways_chaos.faults import journal as journal_module
    from pathways_chaos.harness.cli.rollback import rollback_main

    monkeypatch.setattr(journal_module, "ROLLBACK_RETRY_DELAYS", (0.1, 0.1))
    workload = pathways_workload
    api = workload.api_client
    folder = tmp_path / "j"
    folder.mkdir(mode=0o700)
    journal = RollbackJournal(folder / "a.jsonl")
    target = make_kube_target(workload, armed=True, journal=journal)
    outage = Outage(api)
    try:
        with journal.guard(api):
            CordonNodes(slice=0).inject(target)
            outage.down = True
    finally:
        outage.down = False
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]

    assert len(lines) == 1, lines
    assert "rollback incomplete after 3 tries" in lines[0]
    assert "2 change(s) left (#2 cordon node" in lines[0]
    assert f"finish with `pathways-chaos rollback {journal.path}`" in lines[0]
    argv = [str(journal.path), "--kubeconfig", str(kube_control_plane.kubeconfig)]
    assert rollback_main([*argv, "--context", kube_control_plane.context]) == 0
    assert journal.pending() == []


def test_a_child_acting_for_the_session_checks_the_lease_names_the_session(
    pathways_workload: PathwaysWorkload,
) -> None:
    """``check_holder``, the fence of an episode's child process: it passes while the Lease
    names the session it acts for (a renewal missed in a blip included), refuses once another
    session holds it or it went three durations unrenewed, and never takes the Lease itself."""
    from pathways_chaos.faults.lease import check_holder

    workload = pathways_workload
    api, ns, jobset = workload.api_client, workload.namespace, workload.jobset
    session = TargetLease(api, ns, jobset, "session-a", duration_s=1)
    session.__enter__()
    try:
        check_holder(api, ns, jobset, session.holder)  # held and renewed: goes on
        with pytest.raises(LeaseLost, match=r"held by .*run session-a, not by this session"):
            check_holder(api, ns, jobset, session.holder.replace("session-a", "session-x"))
        stall(session)  # one duration without a renewal: an API blip, still the session's
        check_holder(api, ns, jobset, session.holder)
        time.sleep(2 * session.duration_s)  # three: the session stopped
        with pytest.raises(LeaseLost, match="expired"):
            check_holder(api, ns, jobset, session.holder)
        lease: Any = client.CoordinationV1Api(api).read_namespaced_lease(session.name, ns)
        assert lease.spec.holder_identity == session.holder  # read only, never taken over
    finally:
        session.release()
