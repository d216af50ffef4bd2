"""``pathways-chaos rollback JOURNAL | --pending``: undo what a crashed run left behind.

Why a command of its own: after a SIGKILL nothing of the run is left but its journal. The
command finds it (``--pending``: every unfinished journal of the kubeconfig's cluster in the
journal folder), refuses another cluster's, reports malformed lines by number, and turns every
problem into one line and a documented exit code.

A journal is evidence, not an instruction: one that is planted, edited, symlinked, another
user's, or in a folder others can write is refused (exit 3) and nothing of it is undone; one a
live session still holds is left to it; an unreadable journal or folder is an error (exit 1).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pathways_chaos.faults.journal import (
    JOURNAL_DIR_ENV,
    ClusterIdentity,
    JournalError,
    JournalRefused,
    RollbackJournal,
    default_journal_dir,
    pending_journals,
    read_journal,
    scan_journal_folder,
    short_error,
)
from pathways_chaos.faults.journal_trust import holder_state
from pathways_chaos.harness.engine.command_errors import reported
from pathways_chaos.harness.engine.option_values import OneLineArgumentParser
from pathways_chaos.harness.engine.owned_paths import existing_folder, lstat_or_none
from pathways_chaos.harness.engine.untrusted_files import shown
from pathways_chaos.harness.errors import ChaosError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

#: Exit codes (documented in the README).
EXIT_OK, EXIT_INCOMPLETE, EXIT_USAGE, EXIT_REFUSED, EXIT_CLUSTER = 0, 1, 2, 3, 4


ROLLBACK_EPILOG = """exit codes: 0 everything undone (or nothing to undo); 1 something was
skipped or left (a malformed line, an undo that failed, an unreadable journal or folder, a
journal of another host's session: see stderr); 2 bad input (no such journal, a folder, a
FIFO); 3 refused (another cluster's journal; a journal planted, edited, symlinked or in a
folder others can write; a live session's journal); 4 the kubeconfig or the cluster cannot be
reached."""


def build_parser() -> argparse.ArgumentParser:
    """``pathways-chaos rollback``'s options (the generated bad-input test walks them)."""
    parser = OneLineArgumentParser(
        prog="pathways-chaos rollback",
        description="Undo every change recorded in a rollback journal (safe to run twice).",
        epilog=ROLLBACK_EPILOG,
    )
    parser.add_argument("journal", nargs="?", help="path of the JSONL rollback journal")
    parser.add_argument(
        "--pending",
        action="store_true",
        help="undo every unfinished journal of the current cluster in the journal folder",
    )
    parser.add_argument(
        "--journal-dir",
        type=Path,
        default=None,
        help=(
            f"the journal folder (default ${JOURNAL_DIR_ENV} or "
            "$XDG_STATE_HOME/pathways-chaos/journals)"
        ),
    )
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube)")
    parser.add_argument("--context", help="kubeconfig context (default: its current context)")
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would be undone, change nothing"
    )
    parser.add_argument(
        "--assume-cluster",
        action="store_true",
        help="undo a journal without a cluster header (an old one) against this cluster",
    )
    parser.add_argument(
        "--holder-gone",
        action="store_true",
        help="undo a journal written on another host: you checked its session has ended",
    )
    parser.add_argument(
        "--cluster",
        help=(
            "CONTEXT or KUBECONFIG:CONTEXT: undo what dead sessions on --jobset left, from the "
            "journals mirrored on the cluster itself (no journal file needed)"
        ),
    )
    parser.add_argument("--namespace", help="with --cluster: the JobSet's namespace")
    parser.add_argument("--jobset", help="with --cluster: the JobSet's name")
    return parser


def rollback_main(argv: list[str]) -> int:
    """``pathways-chaos rollback JOURNAL | --pending``: undo what a crashed run left behind."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if sum(map(bool, (args.journal, args.pending, args.cluster))) != 1:
        parser.error("name one JOURNAL, or pass --pending, or --cluster (one of them)")
    if args.cluster:
        return reported("pathways-chaos rollback", lambda: _rollback_mirrored(args))
    if args.pending:
        return reported("pathways-chaos rollback", lambda: _rollback_pending(args))
    return reported("pathways-chaos rollback", lambda: _rollback_one(args, Path(args.journal)))


def _connect(args: argparse.Namespace) -> ApiClient:
    """An API client for the kubeconfig, or a one-line ``ChaosError`` (exit 4)."""
    try:
        from kubernetes import config
    except ImportError:
        raise JournalError(
            "the kubernetes package is not installed: pip install kubernetes"
        ) from None
    try:
        api = config.new_client_from_config(
            config_file=args.kubeconfig, context=args.context, persist_config=False
        )
    except Exception as error:  # ConfigException, YAML errors, OSError: all one line
        raise _ClusterUnreachable(
            f"cannot load the kubeconfig ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else 'unreadable'}): "
            "pass --kubeconfig FILE and --context NAME"
        ) from None
    api.configuration.retries = 0
    return api


class _ClusterUnreachable(ChaosError):
    exit_code = EXIT_CLUSTER


def _identity(api: ApiClient) -> ClusterIdentity:
    try:
        return ClusterIdentity.of(api)
    except Exception as error:
        raise _ClusterUnreachable(
            f"cannot read the cluster's identity at {api.configuration.host} "
            f"({short_error(error)}): check the kubeconfig, the context and the network"
        ) from None


def _rollback_one(args: argparse.Namespace, path: Path, *, holder_checked: bool = False) -> int:
    if lstat_or_none(path, "journal") is None:
        raise JournalError(f"no journal at {shown(path)}")
    contents = read_journal(path)
    if contents.header is None and len(contents.problems) > 1 and not contents.pending():
        raise JournalError(  # one line, not a SKIPPED line for each line of another file
            f"{shown(path)} is not a rollback journal (none of its {len(contents.problems)} "
            "lines is a journal record): give the journal a session wrote (rollback --pending "
            "finds them)"
        )
    for note in contents.notes:
        print(f"{path}: {note}")
    for problem in contents.problems:
        print(f"SKIPPED {path}: {problem}", file=sys.stderr)
    if not contents.pending():
        print(f"{path}: nothing to undo")
        return EXIT_INCOMPLETE if contents.problems else EXIT_OK
    if not holder_checked and contents.header is not None:
        state, why = holder_state(contents.header)
        if state == "live":
            raise JournalRefused(
                f"refused: journal {path} is {why} on this host, a live session that rolls it "
                "back itself: stop that session first"
            )
        if state == "unknown" and not args.holder_gone:
            raise JournalRefused(
                f"refused: journal {path} was {why}; cannot tell whether that session is alive: "
                "if it has ended, run again with --holder-gone"
            )
    api = _connect(args)
    _identity(api)  # unreachable: one line, exit 4, before anything else
    result = RollbackJournal(path).replay(
        api, dry_run=args.dry_run, assume_cluster=args.assume_cluster
    )
    for line in result.lines:
        print(line)
    for error in result.errors:
        print(f"FAILED {error}", file=sys.stderr)
    return EXIT_OK if result.ok else EXIT_INCOMPLETE


def _rollback_pending(args: argparse.Namespace) -> int:
    directory = args.journal_dir or default_journal_dir()
    if existing_folder(directory, what="journal folder", unreadable=_Unreadable) is None:
        print(f"{shown(directory)}: no journal folder, nothing to undo")
        return EXIT_OK
    scanned = scan_journal_folder(directory)  # before connecting: a bad journal is said anyway
    code = EXIT_OK
    for _, error in scanned:
        if isinstance(error, ChaosError):
            print(f"pathways-chaos rollback: {error}", file=sys.stderr)
            code = max(code, error.exit_code)
    believed = [(p, c) for p, c in scanned if not isinstance(c, ChaosError)]
    if not any(c.pending() for _, c in believed):
        if code == EXIT_OK:
            print(f"{directory}: no unfinished journal")
        return code
    api = _connect(args)
    identity = _identity(api)
    journals = pending_journals(directory, identity, list(believed))
    if not journals:
        print(f"{directory}: no unfinished journal for cluster {identity.cluster_uid}")
        return code
    for found in journals:
        if found.state == "live":
            print(f"{found.path}: skipped, {found.why} (a live session rolls it back itself)")
            continue
        if found.state == "unknown" and not args.holder_gone:
            print(
                f"LEFT {found.path}: {found.why}; cannot tell whether that session is alive: if it "
                f"has ended, run `pathways-chaos rollback {found.path} --holder-gone`",
                file=sys.stderr,
            )
            code = max(code, EXIT_INCOMPLETE)
            continue
        print(f"{found.path}: ({found.why})" if found.why else f"{found.path}:")
        try:
            code = max(code, _rollback_one(args, found.path, holder_checked=True))
        except ChaosError as error:  # one journal's problem must not strand the others
            print(f"pathways-chaos rollback: {error}", file=sys.stderr)
            code = max(code, error.exit_code)
    return code


def _rollback_mirrored(args: argparse.Namespace) -> int:
    """``--cluster``: every dead session's journal mirrored beside the JobSet, verified with the
    cluster's key and undone; a live session's is left to it."""
    from pathways_chaos.faults.journal_mirror import read_mirrors, roll_back_mirror
    from pathways_chaos.faults.lease import live_holder
    from pathways_chaos.harness.kube.kube_cluster import ClusterSpec, connect

    spec = ClusterSpec.parse(args.cluster, args.namespace, args.jobset)
    try:
        api = connect(spec)
    except ChaosError as error:
        raise _ClusterUnreachable(str(error).replace("--cluster: ", "", 1)) from None
    code = EXIT_OK
    found = read_mirrors(api, spec.namespace, spec.jobset)
    if not any(m.contents.pending() for m in found):
        print(f"{spec.namespace}/{spec.jobset}: no journal left on the cluster, nothing to undo")
    for mirrored in found:
        where = f"{spec.namespace}/{mirrored.name}"
        for problem in mirrored.contents.problems:
            print(f"SKIPPED {where}: {problem}", file=sys.stderr)
            code = max(code, EXIT_INCOMPLETE)
        if not mirrored.contents.pending():
            continue
        holder = live_holder(api, spec.namespace, spec.jobset, mirrored.run_id)
        if holder is not None:
            print(f"{where}: skipped, its session ({holder}) holds the Lease and rolls it back")
            continue
        print(f"{where}:")
        result = roll_back_mirror(api, spec.namespace, spec.jobset, mirrored, dry_run=args.dry_run)
        for line in result.lines:
            print(line)
        for failed in result.errors:
            print(f"FAILED {failed}", file=sys.stderr)
        code = max(code, EXIT_OK if result.ok else EXIT_INCOMPLETE)
    return code


class _Unreadable(ChaosError):
    exit_code = EXIT_INCOMPLETE
