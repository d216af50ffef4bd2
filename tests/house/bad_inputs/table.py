"""Bad and edge inputs a suspicious user tries, each with the one-line answer it must get.

Why a table in its own module: the regression test runs every row, and the bench counts the
same rows (tried / one-line errors / tracebacks / silent successes), so the figure and the test
cannot disagree. Each row runs in a new process, exactly as a person would type it.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CLI = [sys.executable, "-m", "pathways_chaos.harness.cli.main"]
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q"]

REFERENCE_LOOP = "pathways_chaos.harness.reference.user_loop:main"
PLAIN_TEST = "def test_plain():\n    pass\n"
CHAOS_TEST = """
def test_it(chaos):
    chaos.run({schedule!r}, final_step=6, snapshot_interval=2)
"""


@dataclasses.dataclass(frozen=True)
class Row:
    """One bad input: the command, the exit code it must end with, and text its error carries."""

    name: str
    argv: tuple[str, ...]
    exit_code: int
    says: str
    env: tuple[tuple[str, str], ...] = ()
    setup: Callable[[Path], None] | None = None
    pytest_session: bool = False  # a pytest run: its summary lines are allowed around the error
    max_chars: int = 0  # when set: the whole output is at most this long (a huge value is cut)


def _write(name: str, content: bytes | str) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)

    return setup


def _journal(
    name: str,
    records: list[dict[str, object]],
    edit: Callable[[bytes], bytes] | None = None,
    mode: int = 0o600,
) -> Callable[[Path], None]:
    """A journal signed with the row's own key (``XDG_STATE_HOME`` is the row's ``state``)."""

    def setup(folder: Path) -> None:
        from pathways_chaos.faults.journal_trust import journal_key, signed_journal

        key = journal_key(folder=folder / "state" / "pathways-chaos")
        data = signed_journal(key, records)
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.write_bytes(edit(data) if edit else data)
        path.chmod(mode)

    return setup


def _live_journal(name: str) -> Callable[[Path], None]:
    """A journal whose writer is alive on this host: the process running the table."""

    def setup(folder: Path) -> None:
        from pathways_chaos.faults.journal_trust import holder_of

        _journal(name, [{**HEADER, **holder_of()}, CORDON])(folder)

    return setup


def _symlink(name: str, target: str) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.symlink_to(target)

    return setup


def _fifo(name: str) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.mkfifo(path, 0o600)

    return setup


def _chmod(name: str, mode: int) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        path = folder / name
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(mode)

    return setup


def _chown(name: str, uid: int) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        os.chown(folder / name, uid, uid)

    return setup


def _sparse(name: str, size: int) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        with (folder / name).open("wb") as f:
            f.truncate(size)

    return setup


def _all(*setups: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        for one in setups:
            one(folder)

    return setup


def _chaos_test(schedule: str) -> Callable[[Path], None]:
    return _write("test_user.py", CHAOS_TEST.format(schedule=schedule))


PENDING_CHANGE = (
    '{"journal": 2, "run": "r1", "cluster_uid": "u1", "server": "https://127.0.0.1:1"}\n'
    '{"seq": 1, "run": "r1", "action": "cordon", "node": "n1", "uid": "x"}\n'
)
HEADER: dict[str, object] = {
    "journal": 2,
    "run": "r1",
    "cluster_uid": "u1",
    "server": "https://127.0.0.1:1",
    "host": "another-host.example",
    "pid": 4242,
}
CORDON: dict[str, object] = {"seq": 1, "run": "r1", "action": "cordon", "node": "n1", "uid": "x"}
#: A signed journal whose writer is gone (a dead pid on this host).
ENDED_HEADER = {**HEADER, "host": socket.gethostname(), "pid": 2**22 + 7, "pid_start": "1"}
BILLION_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + chr(ord(c) - 1)] * 9)}]\n" for c in "bcdefghi"
)
LONG = "X" * 120_000
GARBAGE_KUBECONFIG = "this: [is not: a kubeconfig\n"
EMPTY_KUBECONFIG = (
    '{"apiVersion": "v1", "kind": "Config", "current-context": "ctx", '
    '"contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}], '
    '"clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}], '
    '"users": [{"name": "u", "user": {}}]}'
)


def _as_root_rows() -> list[Row]:
    """Rows only root can set up: a file of another user (uid 65534, nobody)."""
    if os.geteuid() != 0:
        return []
    return [
        Row(
            "rollback another user's journal",
            (*CLI, "rollback", "j.jsonl"),
            3,
            "belongs to uid 65534, not you",
            setup=_all(_journal("j.jsonl", [ENDED_HEADER, CORDON]), _chown("j.jsonl", 65534)),
        )
    ]


def rows() -> list[Row]:
    demo = (*CLI, "demo", "--steps", "6")
    pytest_fake = (*PYTEST, "--co")
    return [
        # -- fault text: typed and ranged at parse time ------------------------------------
        Row(
            "non-numeric slice",
            (*demo, "--schedule", "data_loss@step=3:slice=abc"),
            2,
            "slice='abc' is not a whole number",
        ),
        Row(
            "non-numeric grace",
            (*demo, "--schedule", "kill_pods@step=3:slice=1:grace=x"),
            2,
            "grace='x' is not a whole number",
        ),
        Row(
            "non-numeric seconds",
            (*demo, "--schedule", "slow_health@step=3:slice=1:seconds=soon"),
            2,
            "seconds='soon' is not a number",
        ),
        Row("trigger nan", (*demo, "--schedule", "data_loss@step=nan:slice=1"), 2, "never comes"),
        Row("trigger inf", (*demo, "--schedule", "data_loss@time=inf:slice=1"), 2, "never comes"),
        Row(
            "fractional step",
            (*demo, "--schedule", "data_loss@step=1.5:slice=1"),
            2,
            "not a whole number",
        ),
        Row(
            "negative trigger", (*demo, "--schedule", "data_loss@step=-2:slice=1"), 2, "is negative"
        ),
        Row(
            "duplicate parameter",
            (*demo, "--schedule", "data_loss@step=3:slice=1:slice=2"),
            2,
            "given twice",
        ),
        Row(
            "negative duration",
            (*demo, "--schedule", "slow_health@step=3:slice=1:seconds=-5"),
            2,
            "seconds=-5.0 is negative",
        ),
        Row(
            "negative polls",
            (*demo, "--schedule", "repair@step=3:slice=1:after_polls=-1"),
            2,
            "after_polls=-1 is negative",
        ),
        Row(
            "negative slice",
            (*demo, "--schedule", "data_loss@step=3:slice=-1"),
            2,
            "slice=-1 is negative",
        ),
        Row(
            "slice outside topology",
            (*demo, "--schedule", "data_loss@step=3:slice=9"),
            2,
            "slice 9 is outside the cluster's 4 slices",
        ),
        Row(
            "unknown parameter",
            (*demo, "--schedule", "data_loss@step=3:slcie=1"),
            2,
            "unknown parameter(s) slcie",
        ),
        Row(
            "unknown kind", (*demo, "--schedule", "meteor@step=3"), 2, "unknown fault kind 'meteor'"
        ),
        Row("no trigger", (*demo, "--schedule", "data_loss"), 2, "has no trigger"),
        Row(
            "kubernetes fault on the fake",
            (*demo, "--schedule", "kill_pods@step=3:slice=1"),
            2,
            "needs --cluster",
        ),
        Row(
            "bool parameter",
            (*demo, "--schedule", "drain_nodes@step=3:slice=1:force=maybe"),
            2,
            "not a boolean",
        ),
        # -- every parameter checked at parse time (issue 25) --------------------------------
        Row(
            "raise_error code=OK",
            (*demo, "--schedule", "raise_error@step=3:code=OK"),
            2,
            "code='OK' is not an XLA error status",
        ),
        Row(
            "data_loss code=BOGUS",
            (*demo, "--schedule", "data_loss@step=3:code=BOGUS"),
            2,
            "code='BOGUS' is not a slice-down error",
        ),
        Row(
            "replicator_error times=1e9",
            (*demo, "--schedule", "replicator_error@step=3:times=1e9"),
            2,
            "times='1e9' is not a whole number",
        ),
        Row(
            "replicator_error times=1000000000",
            (*demo, "--schedule", "replicator_error@step=3:times=1000000000"),
            2,
            "times=1000000000 is too many",
        ),
        Row(
            "MTC fault on the reference trainer",
            (*demo, "--schedule", "node_loss@step=3:host=1"),
            2,
            "acts on Multi-Tier Checkpointing, and this trainer has none",
        ),
        Row(
            "MTC host=-1",
            (*demo, "--schedule", "node_loss@step=3:host=-1"),
            2,
            "host=-1 is negative",
        ),
        Row(
            "slow_health polls=1e12",
            (*demo, "--schedule", "slow_health@step=3:slice=1:polls=1000000000000"),
            2,
            "polls=1000000000000 is too many",
        ),
        Row(
            "slow_health seconds=1e300",
            (*demo, "--schedule", "slow_health@step=3:slice=1:seconds=1e300"),
            2,
            "is longer than a day",
        ),
        Row(
            "slice beyond int32",
            (*demo, "--schedule", "data_loss@step=3:slice=99999999999999"),
            2,
            "slice=99999999999999 is too large",
        ),
        Row(
            "120k-character value",
            (*demo, "--schedule", f"raise_error@step=3:code={LONG}"),
            2,
            "(120007 characters) is not an XLA error status",
            max_chars=2000,
        ),
        Row(
            "120k-character kind",
            (*demo, "--schedule", f"{LONG}@step=3"),
            2,
            "(120003 characters) known kinds",
            max_chars=2000,
        ),
        Row("demo --schedule ''", (*demo, "--schedule", ""), 2, "--schedule is empty"),
        Row(
            "chaos.run(loop=42)",
            (*PYTEST, "test_user.py"),
            1,
            "loop=42 (of type int) is not a loop",
            setup=_write(
                "test_user.py",
                "def test_it(chaos):\n    chaos.run('data_loss@batch=3:slice=1', loop=42)\n",
            ),
            pytest_session=True,
        ),
        Row(
            "chaos.run MTC fault on the reference trainer",
            (*PYTEST, "test_user.py"),
            1,
            "this trainer has none",
            setup=_chaos_test("node_loss@step=3:host=1"),
            pytest_session=True,
        ),
        # -- faults whose trigger never comes: never "survived" ----------------------------
        Row(
            "step never reached",
            (*demo, "--schedule", "data_loss@step=999999:slice=1"),
            1,
            "fault never fired: data_loss@step=999999:slice=1 (step=999999 > last step 5)",
        ),
        Row(
            "trigger beyond int32",
            (*demo, "--schedule", "data_loss@step=999999999999:slice=1"),
            2,
            "trigger step=999999999999 is too large: use at most 2147483647",
        ),
        Row(
            "restore never reached",
            (*demo, "--schedule", "data_loss@restore=99:slice=1"),
            1,
            "fault never fired: data_loss@restore=99:slice=1",
        ),
        # -- demo, replay, check ------------------------------------------------------------
        Row("demo --log DIR", (*demo, "--log", "."), 2, "is a folder"),
        # a log planted as a symlink (a shared folder) was appended to through it; a FIFO hung
        Row(
            "demo --log a planted symlink",
            (*demo, "--log", "log.jsonl"),
            2,
            "--log log.jsonl is a symlink",
            setup=_all(_write("decoy.txt", "keep"), _symlink("log.jsonl", "decoy.txt")),
        ),
        Row(
            "demo --log a FIFO",
            (*demo, "--log", "log.jsonl"),
            2,
            "--log log.jsonl is a FIFO (named pipe)",
            setup=_fifo("log.jsonl"),
        ),
        Row(
            "demo --log name too long",
            (*demo, "--log", "L" * 300),
            2,
            "File name too long",
        ),
        Row("demo --slices -1", (*demo, "--slices", "-1"), 2, "--slices '-1': use a whole number"),
        Row("demo --slices 5000", (*demo, "--slices", "5000"), 2, "slices from 1 to 1024"),
        Row("demo --steps 0", (*CLI, "demo", "--steps", "0"), 2, "--steps '0': use"),
        Row("demo --mode", (*demo, "--mode", "elastic"), 2, "elastic"),
        Row(
            "replay --data-size 3",
            (*CLI, "replay", "--data-size", "3"),
            2,
            "--data-size 3 is too small",
        ),
        Row(
            "replay negative poll",
            (*CLI, "replay", "--poll-interval", "-1"),
            2,
            "--poll-interval '-1': use a whole number of seconds from 0",
        ),
        Row("replay --steps 0", (*CLI, "replay", "--steps", "0"), 2, "--steps '0': use"),
        Row(
            "replay unfired",
            (*CLI, "replay", "--steps", "4", "--schedule", "data_loss@step=99:slice=1"),
            1,
            "fault never fired",
        ),
        Row("check missing log", (*CLI, "check", "missing.jsonl"), 2, "No such file"),
        Row("check a folder", (*CLI, "check", "."), 2, "Is a directory"),
        Row(
            "check a FIFO",
            (*CLI, "check", "log.jsonl"),
            2,
            "log.jsonl is a FIFO (named pipe), not an event log",
            setup=_fifo("log.jsonl"),
        ),
        Row(
            "check /dev/zero",
            (*CLI, "check", "z.jsonl"),
            2,
            "z.jsonl is a device or socket, not an event log",
            setup=_symlink("z.jsonl", "/dev/zero"),
        ),
        Row(
            "check not a log",
            (*CLI, "check", "notes.txt"),
            2,
            "is not a JSONL event log",
            setup=_write("notes.txt", "hello\n"),
        ),
        # -- rollback -------------------------------------------------------------------------
        Row(
            "rollback missing journal",
            (*CLI, "rollback", "missing.jsonl"),
            2,
            "no journal at missing.jsonl",
        ),
        Row("rollback a folder", (*CLI, "rollback", "."), 2, "is a folder, not a journal"),
        Row(
            "rollback non-UTF-8",
            (*CLI, "rollback", "j.jsonl"),
            1,
            "line 1: not UTF-8",
            setup=_write("j.jsonl", b"\xff\xfe\x00garbage\n"),
        ),
        Row(
            "rollback line 42",
            (*CLI, "rollback", "j.jsonl"),
            1,
            "line 1: not a journal record (int 42)",
            setup=_write("j.jsonl", "42\n"),
        ),
        Row(
            "rollback line null",
            (*CLI, "rollback", "j.jsonl"),
            1,
            "line 1: not a journal record",
            setup=_write("j.jsonl", "null\n"),
        ),
        Row(
            "rollback seq only (unsigned)",
            (*CLI, "rollback", "j.jsonl"),
            3,
            "line 1 is not as your pathways-chaos wrote it",
            setup=_write("j.jsonl", '{"seq": 99}\n'),
        ),
        Row(
            "rollback signed seq only",
            (*CLI, "rollback", "j.jsonl"),
            1,
            "change #99 has unknown action",
            setup=_journal("j.jsonl", [{"seq": 99}]),
        ),
        Row(
            "rollback cut mid-file",
            (*CLI, "rollback", "j.jsonl"),
            3,
            "line 2 is not as your pathways-chaos wrote it",
            setup=_write("j.jsonl", '{"seq": 1, "action": "cor\n{"undone": 5}\n'),
        ),
        Row(
            "rollback no kubeconfig",
            (*CLI, "rollback", "j.jsonl", "--kubeconfig", "missing-kubeconfig"),
            4,
            "cannot load the kubeconfig",
            setup=_journal("j.jsonl", [ENDED_HEADER, CORDON]),
        ),
        Row(
            "rollback garbage kubeconfig",
            (*CLI, "rollback", "j.jsonl", "--kubeconfig", "kc"),
            4,
            "cannot load the kubeconfig",
            setup=_all(
                _journal("j.jsonl", [ENDED_HEADER, CORDON]), _write("kc", GARBAGE_KUBECONFIG)
            ),
        ),
        # -- journals are evidence, not instructions (issue 25) ------------------------------
        Row(
            "rollback planted journal",
            (*CLI, "rollback", "j.jsonl"),
            3,
            "line 1 is not as your pathways-chaos wrote it",
            setup=_write("j.jsonl", PENDING_CHANGE),
        ),
        Row(
            "rollback header-less --assume-cluster",
            (*CLI, "rollback", "j.jsonl", "--assume-cluster"),
            3,
            "line 1 is not as your pathways-chaos wrote it",
            setup=_write("j.jsonl", PENDING_CHANGE.split("\n", 1)[1]),
        ),
        Row(
            "rollback edited node uid",
            (*CLI, "rollback", "j.jsonl"),
            3,
            "line 2 is not as your pathways-chaos wrote it",
            setup=_journal(
                "j.jsonl", [ENDED_HEADER, CORDON], edit=lambda b: b.replace(b'"x"', b'"admins"')
            ),
        ),
        Row(
            "rollback line removed",
            (*CLI, "rollback", "j.jsonl"),
            3,
            "line 1 is not as your pathways-chaos wrote it",
            setup=_journal("j.jsonl", [ENDED_HEADER, CORDON], edit=lambda b: b.split(b"\n", 1)[1]),
        ),
        Row(
            "rollback journal symlink",
            (*CLI, "rollback", "j.jsonl"),
            3,
            "is a symlink",
            setup=_all(
                _journal("real/r.jsonl", [ENDED_HEADER, CORDON]),
                _symlink("j.jsonl", "real/r.jsonl"),
            ),
        ),
        Row(
            "rollback symlink to /dev/zero",
            (*CLI, "rollback", "z.jsonl"),
            3,
            "is a symlink",
            setup=_symlink("z.jsonl", "/dev/zero"),
        ),
        Row("rollback /dev/zero", (*CLI, "rollback", "/dev/zero"), 3, "is a device"),
        Row(
            "rollback a FIFO",
            (*CLI, "rollback", "f.jsonl"),
            3,
            "is a FIFO (named pipe)",
            setup=_fifo("f.jsonl"),
        ),
        Row(
            "rollback --pending with a FIFO",
            (*CLI, "rollback", "--pending", "--journal-dir", "jd"),
            3,
            "is a FIFO (named pipe)",
            setup=_fifo("jd/f.jsonl"),
        ),
        Row(
            "rollback --pending world-writable folder",
            (*CLI, "rollback", "--pending", "--journal-dir", "jd"),
            3,
            "can be written by other users",
            setup=_chmod("jd", 0o777),
        ),
        Row(
            "rollback world-writable journal's folder",
            (*CLI, "rollback", "jd/j.jsonl"),
            3,
            "can be written by other users",
            setup=_all(_journal("jd/j.jsonl", [ENDED_HEADER, CORDON]), _chmod("jd", 0o1777)),
        ),
        Row(
            "rollback --pending under /dev/null",
            (*CLI, "rollback", "--pending", "--journal-dir", "/dev/null/journals"),
            2,
            "a part of the path is not a folder",
        ),
        Row(
            "rollback --pending a file",
            (*CLI, "rollback", "--pending", "--journal-dir", "afile"),
            2,
            "is not a folder",
            setup=_write("afile", "x"),
        ),
        Row(
            "rollback another host's journal",
            (*CLI, "rollback", "j.jsonl"),
            3,
            "run again with --holder-gone",
            setup=_journal("j.jsonl", [HEADER, CORDON]),
        ),
        Row(
            "rollback a live session's journal",
            (*CLI, "rollback", "j.jsonl"),
            3,
            "a live session that rolls it back itself",
            setup=_live_journal("j.jsonl"),
        ),
        *_as_root_rows(),
        Row(
            "rollback oversized journal",
            (*CLI, "rollback", "j.jsonl"),
            3,
            "more than any run writes",
            setup=_sparse("j.jsonl", 65 * 1024 * 1024),
        ),
        Row(
            "rollback two modes",
            (*CLI, "rollback", "j.jsonl", "--pending"),
            2,
            "name one JOURNAL, or pass --pending",
        ),
        Row("rollback nothing", (*CLI, "rollback"), 2, "name one JOURNAL, or pass --pending"),
        # -- pytest options: pytest.UsageError in pytest_configure, exit 4 ------------------
        Row(
            "--fake-slices -1",
            (*pytest_fake, "--fake-slices", "-1"),
            4,
            "--fake-slices '-1': use a whole number of slices from 1 to 1024",
            pytest_session=True,
        ),
        Row(
            "--fake-slices 0",
            (*pytest_fake, "--fake-slices", "0"),
            4,
            "--fake-slices '0': use",
            pytest_session=True,
        ),
        Row(
            "--fake-slices 5000",
            (*pytest_fake, "--fake-slices", "5000"),
            4,
            "--fake-slices '5000': use a whole number of slices from 1 to 1024",
            pytest_session=True,
        ),
        Row(
            "PATHWAYS_CHAOS_SLICES=abc",
            pytest_fake,
            4,
            "PATHWAYS_CHAOS_SLICES (as --fake-slices) 'abc': use a whole number of slices",
            env=(("PATHWAYS_CHAOS_SLICES", "abc"),),
            pytest_session=True,
        ),
        Row(
            "PATHWAYS_CHAOS_SLICES=0",
            pytest_fake,
            4,
            "PATHWAYS_CHAOS_SLICES (as --fake-slices) '0': use a whole number of slices",
            env=(("PATHWAYS_CHAOS_SLICES", "0"),),
            pytest_session=True,
        ),
        Row(
            "PATHWAYS_CHAOS_DEVICES_PER_SLICE=inf",
            pytest_fake,
            4,
            "PATHWAYS_CHAOS_DEVICES_PER_SLICE (as --fake-devices-per-slice) 'inf': use a whole",
            env=(("PATHWAYS_CHAOS_DEVICES_PER_SLICE", "inf"),),
            pytest_session=True,
        ),
        Row(
            "--cluster= empty",
            (*pytest_fake, "--cluster="),
            4,
            "--cluster is empty",
            pytest_session=True,
        ),
        Row(
            "--cluster without --jobset",
            (*pytest_fake, "--cluster=ctx", "--namespace=ns"),
            4,
            "--jobset is missing",
            pytest_session=True,
        ),
        Row(
            "--chaos-progress-every 0",
            (*pytest_fake, "--chaos-progress-every", "0"),
            4,
            "--chaos-progress-every '0': use",
            pytest_session=True,
        ),
        Row(
            "--chaos-allow-namespace bad",
            (*pytest_fake, "--chaos-allow-namespace", "Bad_NS"),
            4,
            "not a Kubernetes namespace name",
            pytest_session=True,
        ),
        Row(
            "--chaos-journal-dir a file",
            (*pytest_fake, "--chaos-journal-dir", "afile"),
            4,
            "afile is a file, not a folder",
            setup=_write("afile", "x"),
            pytest_session=True,
        ),
        Row(
            "garbage kubeconfig",
            (*PYTEST, "test_user.py", "--cluster=kc:ctx", "--namespace=ns", "--jobset=js"),
            4,
            "is not a valid kubeconfig",
            setup=_all(_write("kc", GARBAGE_KUBECONFIG), _chaos_test("")),
            pytest_session=True,
        ),
        Row(
            "unknown context",
            (*PYTEST, "test_user.py", "--cluster=kc:nope", "--namespace=ns", "--jobset=js"),
            4,
            "unknown context 'nope'",
            setup=_all(_write("kc", EMPTY_KUBECONFIG), _chaos_test("")),
            pytest_session=True,
        ),
        Row(
            "--chaos-arm without --cluster",
            (*pytest_fake, "--chaos-arm"),
            4,
            "--chaos-arm needs --cluster",
            pytest_session=True,
        ),
        Row(
            "--chaos-allow-namespace without --cluster",
            (*pytest_fake, "--chaos-allow-namespace", "team-a"),
            4,
            "--chaos-allow-namespace needs --cluster",
            pytest_session=True,
        ),
        Row(
            "--chaos-lease-seconds beyond int32",
            (*pytest_fake, "--chaos-lease-seconds", "2147483648"),
            4,
            "(the Lease API's int32) from 1 to 2147483647",
            pytest_session=True,
        ),
        Row(
            "--acceptance-params=1e400",
            (*pytest_fake, "--acceptance-params=1e400"),
            4,
            "1e400 is not a parameter count between",
            pytest_session=True,
        ),
        Row(
            "--acceptance-params=0",
            (*pytest_fake, "--acceptance-params=0"),
            4,
            "0 is not a parameter count between",
            pytest_session=True,
        ),
        # a report path planted as a symlink was written through at the session's end; a FIFO
        # there hung the finished session for ever
        Row(
            "--chaos-report a planted symlink",
            (*PYTEST, "test_plain.py", "--chaos-report", "r.html"),
            4,
            "--chaos-report r.html is a symlink",
            setup=_all(
                _write("test_plain.py", PLAIN_TEST),
                _write("decoy.txt", "keep"),
                _symlink("r.html", "decoy.txt"),
            ),
            pytest_session=True,
        ),
        Row(
            "--chaos-report a FIFO",
            (*PYTEST, "test_plain.py", "--chaos-report", "r.html"),
            4,
            "--chaos-report r.html is a FIFO (named pipe)",
            setup=_all(_write("test_plain.py", PLAIN_TEST), _fifo("r.html")),
            pytest_session=True,
        ),
        # a report named over the user's own source was written over it (HTML in train.py)
        Row(
            "--acceptance-report the user's source",
            (*pytest_fake, "--acceptance-report", "train.py"),
            4,
            "--acceptance-report train.py exists and is not a report of pathways-chaos",
            setup=_write("train.py", "import jax\n"),
            pytest_session=True,
        ),
        Row(
            "--acceptance-report a folder",
            (*pytest_fake, "--acceptance-report", "."),
            4,
            "--acceptance-report . is a folder",
            pytest_session=True,
        ),
        Row(
            "--acceptance-source binary",
            (*pytest_fake, "--acceptance-source", "bin.py"),
            4,
            "bin.py is not UTF-8 text",
            setup=_write("bin.py", b"import os\n\xff\xfe\x00binary\n"),
            pytest_session=True,
        ),
        Row(
            "--acceptance-manifest binary",
            (*pytest_fake, "--acceptance-manifest", "m.yaml"),
            4,
            "m.yaml is not UTF-8 text",
            setup=_write("m.yaml", b"kind: JobSet\n\x89PNG\r\n\x1a\n"),
            pytest_session=True,
        ),
        # a name longer than the file system allows was an INTERNALERROR traceback (OSError)
        Row(
            "--acceptance-manifest name too long",
            (*pytest_fake, "--acceptance-manifest", "9" * 400),
            4,
            "File name too long",
            pytest_session=True,
        ),
        Row(
            "--chaos-log-dir name too long",
            (*pytest_fake, "--chaos-log-dir", "9" * 400),
            4,
            "File name too long",
            pytest_session=True,
        ),
        Row(
            "--chaos-journal-dir name too long",
            (*pytest_fake, "--chaos-journal-dir", "9" * 400),
            4,
            "File name too long",
            pytest_session=True,
        ),
        Row(
            "--acceptance-manifest billion laughs",
            (*pytest_fake, "--acceptance-manifest", "m.yaml"),
            4,
            "a 'billion laughs' document?",
            setup=_write("m.yaml", BILLION_LAUGHS),
            pytest_session=True,
        ),
        Row(
            "--acceptance-manifest a FIFO",
            (*pytest_fake, "--acceptance-manifest", "m.yaml"),
            4,
            "is a FIFO (named pipe)",
            setup=_fifo("m.yaml"),
            pytest_session=True,
        ),
        Row(
            "--chaos-journal-dir under /dev/null",
            (*pytest_fake, "--chaos-journal-dir", "/dev/null/journals"),
            4,
            "is under /dev/null, which is a device",
            pytest_session=True,
        ),
        Row(
            "PATHWAYS_CHAOS_XLA_CACHE a file",
            (*PYTEST, "test_user.py"),
            4,
            "compilation cache afile is a file",
            env=(("PATHWAYS_CHAOS_XLA_CACHE", "afile"),),
            setup=_all(_write("afile", "x"), _chaos_test("")),
            pytest_session=True,
        ),
        Row(
            "PATHWAYS_CHAOS_XLA_CACHE in /proc",
            (*PYTEST, "test_user.py"),
            4,
            "is in a kernel file system",
            env=(("PATHWAYS_CHAOS_XLA_CACHE", "/proc/self"),),
            setup=_chaos_test(""),
            pytest_session=True,
        ),
        # -- ramdisk: numbers and files ------------------------------------------------------
        Row(
            "ramdisk --params 1e400",
            (*CLI, "ramdisk", "--params", "1e400", "--hosts-per-slice", "2"),
            2,
            "1e400 is not a parameter count between",
        ),
        Row(
            "ramdisk --params 0",
            (*CLI, "ramdisk", "--params", "0", "--hosts-per-slice", "2"),
            2,
            "0 is not a parameter count between",
        ),
        Row(
            "ramdisk billion laughs",
            (
                *CLI,
                "ramdisk",
                "--params",
                "8e9",
                "--hosts-per-slice",
                "2",
                "--checkpoint-configuration",
                "c.yaml",
            ),
            2,
            "a 'billion laughs' document?",
            setup=_write("c.yaml", BILLION_LAUGHS),
        ),
        Row(
            "ramdisk binary YAML",
            (
                *CLI,
                "ramdisk",
                "--params",
                "8e9",
                "--hosts-per-slice",
                "2",
                "--checkpoint-configuration",
                "c.yaml",
            ),
            2,
            "c.yaml is not UTF-8 text",
            setup=_write("c.yaml", b"\xff\xfe\x00\x01"),
        ),
        Row(
            "ramdisk /dev/zero",
            (
                *CLI,
                "ramdisk",
                "--params",
                "8e9",
                "--hosts-per-slice",
                "2",
                "--checkpoint-configuration",
                "/dev/zero",
            ),
            2,
            "/dev/zero is a device",
        ),
        Row(
            "ramdisk FIFO",
            (
                *CLI,
                "ramdisk",
                "--params",
                "8e9",
                "--hosts-per-slice",
                "2",
                "--checkpoint-configuration",
                "c.yaml",
            ),
            2,
            "is a FIFO (named pipe)",
            setup=_fifo("c.yaml"),
        ),
        # -- a chaos test's own schedule ------------------------------------------------------
        Row(
            "chaos.run kill_pods on the fake",
            (*PYTEST, "test_user.py"),
            1,
            "kill_pods acts on Kubernetes objects and needs --cluster",
            setup=_chaos_test("kill_pods@step=3:slice=1"),
            pytest_session=True,
        ),
        Row(
            "chaos.run never fires",
            (*PYTEST, "test_user.py"),
            1,
            "fault never fired: data_loss@step=999:slice=1 (step=999 > last step 5)",
            setup=_chaos_test("data_loss@step=999:slice=1"),
            pytest_session=True,
        ),
        Row(
            "chaos.run bad text",
            (*PYTEST, "test_user.py"),
            1,
            "slice='x' is not a whole number",
            setup=_chaos_test("data_loss@step=3:slice=x"),
            pytest_session=True,
        ),
        # -- a user's loop that misbehaves: a verdict or one line, never the run's own exit ----
        *_loop_rows(),
    ]


_LOOPS = """
import os, sys, signal


def exits(**options):
    sys.exit(3)


def exits_hard(**options):
    os._exit(0)


def kills_itself(**options):
    os.kill(os.getpid(), signal.SIGKILL)


def returns_a_string(**options):
    return "done"


def spins(**options):
    while True:
        pass


class NotALoop:
    pass


def needs_a_folder(model_dir, **options):
    return {"w": 1.0}
"""


def _loop_rows() -> list[Row]:
    demo_loop = (*CLI, "demo", "--loop")
    loops = _write("loops.py", _LOOPS)
    return [
        Row(
            "--chaos-loop= (empty)",
            (*PYTEST, "--co", "--chaos-loop="),
            4,
            "--chaos-loop is empty",
            pytest_session=True,
        ),
        Row(
            "loop option the episode gives (checkpoint_dir)",
            (*CLI, "replay", "--loop", REFERENCE_LOOP, "--option", "checkpoint_dir=/tmp/x"),
            2,
            "the loop option checkpoint_dir is the episode's to give",
        ),
        Row(
            "loop option given twice",
            (*CLI, "replay", "--loop", REFERENCE_LOOP, "--option", "a=1", "--option", "a=2"),
            2,
            "--option a= is given twice: keep one",
        ),
        Row(
            "loop with a syntax error",
            (*demo_loop, "bad.py:main"),
            2,
            "SyntaxError: invalid syntax at",
            setup=_write("bad.py", "def main(:\n"),
        ),
        Row(
            "loop file that is binary",
            (*demo_loop, "bin.py:main"),
            2,
            "cannot be loaded",
            setup=_write("bin.py", b"\xb2\xff\x00\x01binary"),
        ),
        Row(
            "loop module raising at import",
            (*demo_loop, "boom.py:main"),
            2,
            "RuntimeError: boom at import at",
            setup=_write("boom.py", "raise RuntimeError('boom at import')\n"),
        ),
        Row(
            "loop that is a class",
            (*demo_loop, "loops.py:NotALoop"),
            2,
            "is a class, not a function",
            setup=loops,
        ),
        Row(
            "loop with a required parameter nothing passes",
            (*demo_loop, "loops.py:needs_a_folder"),
            2,
            "needs model_dir, which nothing passes",
            setup=loops,
        ),
        Row(
            "loop calling sys.exit(3)",
            (*demo_loop, "loops.py:exits"),
            1,
            "the loop called sys.exit(3)",
            setup=loops,
            pytest_session=True,
        ),
        Row(
            "loop calling os._exit(0)",
            (*demo_loop, "loops.py:exits_hard"),
            1,
            "the loop's process exited with code 0: os._exit(0)",
            setup=loops,
            pytest_session=True,
        ),
        Row(
            "loop sending itself SIGKILL",
            (*demo_loop, "loops.py:kills_itself"),
            1,
            "the loop's process was killed by SIGKILL the loop sent itself",
            setup=loops,
            pytest_session=True,
        ),
        Row(
            "loop returning a string at once",
            (*demo_loop, "loops.py:returns_a_string"),
            1,
            "returned at once without training",
            setup=loops,
            pytest_session=True,
        ),
        Row(
            "loop that never returns",
            (*demo_loop, "loops.py:spins", "--wall-deadline", "3"),
            1,
            "the run did not finish",
            setup=loops,
            pytest_session=True,
        ),
    ]


@dataclasses.dataclass
class Outcome:
    row: Row
    returncode: int
    stdout: str
    stderr: str

    @property
    def traceback(self) -> bool:
        text = self.stdout + self.stderr
        return "Traceback (most recent call last)" in text or "INTERNALERROR" in text

    @property
    def silent_success(self) -> bool:
        return self.returncode == 0

    @property
    def error_lines(self) -> list[str]:
        """The lines that carry the row's message (a good answer has exactly one)."""
        return [line for line in (self.stdout + self.stderr).splitlines() if self.row.says in line]

    @property
    def one_line(self) -> bool:
        """The exit code expected, no traceback, and the message on exactly one line.

        A CLI's stderr is that line (no argparse usage block above it); a pytest run has its
        summary around it, but says it once (not once per test).
        """
        if self.traceback or self.returncode != self.row.exit_code or len(self.error_lines) != 1:
            return False
        if self.row.max_chars and len(self.stdout + self.stderr) > self.row.max_chars:
            return False
        if self.row.pytest_session:
            return True
        stderr = [line for line in self.stderr.splitlines() if line.strip()]
        return len(stderr) <= 1 + sum("SKIPPED" in line for line in stderr)

    def explain(self) -> str:
        return (
            f"{self.row.name}: exit {self.returncode} (want {self.row.exit_code}), "
            f"lines with {self.row.says!r}: {len(self.error_lines)}\n"
            f"stdout: {self.stdout[-1500:]}\nstderr: {self.stderr[-1500:]}"
        )


def run_row(row: Row, folder: Path) -> Outcome:
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)  # a private folder, whatever the umask: journals there may be believed
    if row.setup is not None:
        row.setup(folder)
    # Without CI: with CI set, pytest's short summary repeats every failure's line, and each
    # row counts the lines that carry its message.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PATHWAYS_CHAOS_")
        and k not in ("CI", "BUILD_NUMBER")
        # what the plugin set for this session's own workers (JAX's compilation cache): a
        # person typing the row has none of it
        and not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))
    }
    env.update(dict(row.env))
    env["PATHWAYS_CHAOS_JOURNAL_DIR"] = str(folder / "journals")
    env["XDG_STATE_HOME"] = str(folder / "state")  # the row's own journal key
    env["PYTHONWARNINGS"] = "ignore"
    out = subprocess.run(
        list(row.argv),
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        errors="replace",
    )
    return Outcome(row, out.returncode, out.stdout, out.stderr)


def run_all(folder: Path, workers: int = 2) -> list[Outcome]:
    table = rows()
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda ir: run_row(ir[1], folder / f"row-{ir[0]}"), enumerate(table)))


def figures(outcomes: list[Outcome]) -> dict[str, int]:
    return {
        "bad_inputs_tried": len(outcomes),
        "one_line_errors": sum(o.one_line for o in outcomes),
        "tracebacks": sum(o.traceback for o in outcomes),
        "silent_successes": sum(o.silent_success for o in outcomes),
    }
