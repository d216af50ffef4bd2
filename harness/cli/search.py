"""``pathways-chaos search``: the property suites as shards, for a nightly search at scale.

``search --shard I/N --out DIR`` runs shard I (or ``--shards N`` with the index from
``JOB_COMPLETION_INDEX``, as an Indexed Job's Pod); ``search --emit-job N ...`` prints that Job
with the same options; ``search merge DIR... --html out.html`` writes one report from every
shard's episodes. Every input is checked before JAX starts.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pathways_chaos.harness.cli.quiet import restores_library_logging
from pathways_chaos.harness.engine.option_values import OneLineArgumentParser, Range
from pathways_chaos.harness.search.plan import MAX_SHARDS, SEED_SPAN

#: Per profile: seconds a shard searches, examples per seeded round.
PROFILES = {"ci": (120.0, 5), "dev": (600.0, 10), "nightly": (3600.0, 20)}
#: What each numeric option accepts (harness.engine.option_values says it in one line).
BUDGET = Range(0, 7 * 24 * 3600, unit="seconds", inclusive=False)
SHARDS = Range(1, MAX_SHARDS, unit="shards")
EXAMPLES_PER_ROUND = Range(1, 10_000, unit="examples")
ROUNDS = Range(1, SEED_SPAN, unit="rounds")
SEED = Range(0, 2**63 - 1)
BACKOFF_LIMIT = Range(0, 10_000, unit="retries")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog="pathways-chaos search",
        description="search the property suites as shards (merge: one report from the shards)",
    )
    _what_arguments(parser)
    _shard_arguments(parser)
    _where_arguments(parser)
    _job_arguments(parser)
    _merge_arguments(parser)
    return parser


def _what_arguments(parser: argparse.ArgumentParser) -> None:
    """The code under test and the property families."""
    what = parser.add_argument_group("what is searched")
    what.add_argument(
        "--trainer",
        "--chaos-trainer",
        dest="trainer",
        default=None,
        metavar="MODULE:CLASS",
        help="the trainer the property suites run (default: the reference trainer)",
    )
    what.add_argument(
        "--loop",
        "--chaos-loop",
        dest="loop",
        default=None,
        metavar="MODULE:FUNC",
        help="your own elastic loop instead of a trainer class",
    )
    what.add_argument("--topology", default="4x2", help="with --loop: the fake cluster, NxM")
    what.add_argument(
        "--properties",
        default="snapshot,dataset,mesh,stateful",
        help="the property suites to deal out to the shards (comma-separated)",
    )


def _shard_arguments(parser: argparse.ArgumentParser) -> None:
    """Which shard, its seeds and its budget."""
    how = parser.add_argument_group("the shards")
    how.add_argument("--shard", default=None, metavar="I/N", help="run shard I of N")
    how.add_argument(
        "--shards",
        default=None,
        metavar="N",
        help="N shards, this one's index from JOB_COMPLETION_INDEX (an Indexed Job's Pod)",
    )
    how.add_argument(
        "--profile", choices=tuple(PROFILES), default="ci", help="budget and round size"
    )
    how.add_argument("--budget", default=None, metavar="S", help="seconds each shard searches")
    how.add_argument(
        "--examples-per-round",
        default=None,
        metavar="K",
        help="examples per seeded round (each round a new seed of the shard's range)",
    )
    how.add_argument("--rounds", default=None, help="stop after this many rounds")
    how.add_argument(
        "--seed",
        default=None,
        help="the run's base seed (default: from --run-id, else today's UTC date)",
    )
    how.add_argument(
        "--run-id",
        default=os.environ.get("PATHWAYS_CHAOS_SEARCH_RUN"),
        help="the run every shard belongs to (env PATHWAYS_CHAOS_SEARCH_RUN; the Job's uid)",
    )
    how.add_argument("--no-shrink", action="store_true", help="report failures unshrunk")


def _where_arguments(parser: argparse.ArgumentParser) -> None:
    """The shard's files and the shared example database."""
    where = parser.add_argument_group("where results go")
    where.add_argument("--out", type=Path, default=None, help="folder for the shard's files")
    where.add_argument(
        "--database",
        type=Path,
        default=None,
        metavar="DIR",
        help="the shared example database folder (default OUT/../example-db)",
    )
    where.add_argument(
        "--redis",
        default=os.environ.get("PATHWAYS_CHAOS_REDIS"),
        metavar="URL",
        help="a Redis example database instead, e.g. redis://HOST:6379/0 (env "
        "PATHWAYS_CHAOS_REDIS)",
    )


def _job_arguments(parser: argparse.ArgumentParser) -> None:
    """``--emit-job``: the nightly's JobSet (or the shards' Indexed Job) instead of a search."""
    job = parser.add_argument_group(
        "--emit-job: print the nightly (a JobSet of N shards and their merge) instead of searching"
    )
    job.add_argument("--emit-job", default=None, metavar="N", help="N shards")
    job.add_argument(
        "--shards-only",
        action="store_true",
        help="print the shards' Indexed Job alone (no JobSet, no merge: run search merge by hand)",
    )
    job.add_argument("--image", default=None, help="the suite image (ci/gke/Dockerfile)")
    job.add_argument("--job-name", default="pathways-chaos-search")
    job.add_argument("--namespace", default=None)
    job.add_argument(
        "--claim",
        default="pathways-chaos-search",
        help="a ReadWriteMany PersistentVolumeClaim for results (and the database without --redis)",
    )
    job.add_argument(
        "--host-path",
        default=None,
        metavar="DIR",
        help="a folder on the node instead of --claim (a one-node cluster, the local twin)",
    )
    job.add_argument("--cpu", default="2", help="CPU request per shard (cores or millicores)")
    job.add_argument("--memory", default="8Gi", help="memory per shard (e.g. 8Gi)")
    job.add_argument("--backoff-limit", default=None, help="default: N")
    job.add_argument("--service-account", default=None)


def _merge_arguments(parser: argparse.ArgumentParser) -> None:
    """``search merge``'s options, named here so ``search --help`` lists them."""
    merge = parser.add_argument_group(
        "search merge DIR... --html PATH: one report from the shards' folders (exit 1 on a "
        "failure, a missing or unfinished shard, or seeds run twice)"
    )
    merge.add_argument("--html", type=Path, default=None, metavar="PATH", help="the report")
    merge.add_argument("--json", type=Path, default=None, metavar="PATH", help="its figures")
    merge.add_argument(
        "--junit", type=Path, default=None, metavar="PATH", help="one test case per shard"
    )


@restores_library_logging
def search_main(argv: list[str]) -> int:
    from pathways_chaos.harness.engine.command_errors import reported

    if argv[:1] == ["merge"]:
        from pathways_chaos.harness.search.merge import merge_main

        return merge_main(argv[1:])
    args = build_parser().parse_args(argv)
    return reported("pathways-chaos search", lambda: _run(args, argv))


def _run(args: argparse.Namespace, argv: list[str]) -> int:
    from pathways_chaos.harness.errors import ChaosConfigError

    if args.html is not None or args.json is not None or args.junit is not None:
        raise ChaosConfigError(
            "--html, --json and --junit are for the merge: pathways-chaos search merge "
            "DIR... --html PATH"
        )
    if args.shards_only and args.emit_job is None:
        raise ChaosConfigError(
            "--shards-only is for --emit-job N: it prints the shards' Indexed Job alone"
        )
    _numbers(args)
    _check_subject(args)
    if args.emit_job is not None:
        return _emit_job(args, argv)
    return _search(args)


def _properties(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


def _numbers(args: argparse.Namespace) -> None:
    """Every numeric option, parsed once (finite, in range, the flag named) before any use."""
    from pathways_chaos.harness.engine.option_values import parse_number, parse_whole

    whole = {
        "shards": ("--shards", SHARDS),
        "examples_per_round": ("--examples-per-round", EXAMPLES_PER_ROUND),
        "rounds": ("--rounds", ROUNDS),
        "seed": ("--seed", SEED),
        "emit_job": ("--emit-job", SHARDS),
        "backoff_limit": ("--backoff-limit", BACKOFF_LIMIT),
    }
    for dest, (flag, allowed) in whole.items():
        if getattr(args, dest) is not None:
            setattr(args, dest, parse_whole(getattr(args, dest), flag, allowed))
    if args.budget is not None:
        args.budget = parse_number(args.budget, "--budget", BUDGET)


def _budget(args: argparse.Namespace) -> tuple[float, int]:
    budget, per_round = PROFILES[args.profile]
    budget = budget if args.budget is None else args.budget
    per_round = per_round if args.examples_per_round is None else args.examples_per_round
    return budget, per_round


def _check_subject(args: argparse.Namespace) -> None:
    from pathways_chaos.harness.errors import ChaosConfigError

    for flag, value in (("--trainer", args.trainer), ("--loop", args.loop)):
        if value is not None and not value.strip():
            raise ChaosConfigError(
                f"{flag} is empty: name the code under test ({flag} MODULE:NAME), or leave "
                f"{flag} out for the reference trainer"
            )
    if args.trainer and args.loop:
        raise ChaosConfigError("--trainer and --loop both name the code under test: give one")


def _search(args: argparse.Namespace) -> int:
    from pathways_chaos.harness.engine.owned_paths import check_real_folder
    from pathways_chaos.harness.errors import ChaosConfigError
    from pathways_chaos.harness.search.database import open_database
    from pathways_chaos.harness.search.plan import make_plan, parse_shard

    if args.out is None:
        raise ChaosConfigError("--out DIR is missing: the folder the shard writes its files to")
    if args.out.exists() and not args.out.is_dir():
        raise ChaosConfigError(f"--out {args.out} exists and is not a folder: name a folder")
    check_real_folder(args.out, what="--out")
    index, count = parse_shard(args.shard, args.shards)
    budget, per_round = _budget(args)
    plan = make_plan(index, count, args.seed, args.run_id, _properties(args.properties))
    from pathways_chaos.harness.engine.topology import SliceTopology, request_cpu_devices

    topology = SliceTopology.parse(args.topology) if args.loop else SliceTopology(4, 2)
    if args.loop:
        from pathways_chaos.harness.episodes.supervisor import check_loop

        problem = check_loop(args.loop, "--loop")  # loaded in a child: one line, never here
        if problem is not None:
            raise ChaosConfigError(problem)
    if not args.loop and args.trainer and not str(args.trainer).startswith("pathways_chaos."):
        from pathways_chaos.harness.episodes.supervised_trainer import check_trainer

        problem = check_trainer(args.trainer, "--trainer")  # in a child, before any folder
        if problem is not None:
            raise ChaosConfigError(problem)
    database_dir = args.database
    if database_dir is None and not args.redis:
        database_dir = args.out.parent / "example-db"
    database = open_database(args.redis, database_dir)
    request_cpu_devices(topology.device_count)  # before anything starts JAX
    from pathways_chaos.harness.cli.quiet import quiet_libraries

    quiet_libraries()
    if not args.loop and str(args.trainer or "").startswith("pathways_chaos."):
        from pathways_chaos.harness.play import load_object

        load_object(args.trainer, "--trainer")  # a bad spec: one line now, not per example
    from pathways_chaos.harness.properties import enable_compilation_cache
    from pathways_chaos.harness.search.shard import ShardSearch

    enable_compilation_cache()
    shard = ShardSearch(
        plan,
        args.out,
        database,
        trainer=args.trainer,
        loop=args.loop,
        loop_topology=args.topology,
        budget_s=budget,
        examples_per_round=per_round,
        max_rounds=args.rounds,
        shrink=not args.no_shrink,
    )
    report = shard.run()
    seeds = report["seeds"]
    span = f"seeds {seeds[0]}-{seeds[-1]}" if seeds else "no seed (budget spent)"
    print(
        f"pathways-chaos search {plan.index}/{plan.count} ({','.join(plan.properties)}) on "
        f"{shard.subject}: {report['schedules']} schedules in {report['wall_s']:.1f} s, {span}, "
        f"{len(report['findings'])} failed"
    )
    for finding in report["findings"]:
        print(f"  {finding['property']}: {finding['schedule'] or '(no fault)'}")
        if finding["replay"]:
            print(f"    replay: {finding['replay']}")
    for cut in report["unfinished"]:
        print(
            f"  not judged: {cut['property']}, because the budget ended its episode "
            f"(raise --budget): {cut['message']}"
        )
    for error in report["errors"]:
        print(f"  toolkit error in {error['property']}: {error['error']}", file=sys.stderr)
    print(f"episodes: {shard.episodes_path}; report: {shard.report_path}")
    return 2 if report["errors"] else 0


def _emit_job(args: argparse.Namespace, argv: list[str]) -> int:
    from pathways_chaos.harness.engine.option_values import parse_cpu, parse_memory
    from pathways_chaos.harness.errors import ChaosConfigError
    from pathways_chaos.harness.search.job import JobOptions, job_yaml

    budget, _ = _budget(args)
    for flag in ("--shard", "--shards", "--out", "--database", "--run-id"):
        if any(a == flag or a.startswith(flag + "=") for a in argv):
            raise ChaosConfigError(
                f"{flag} is set by the Job for each Pod: leave it out of --emit-job"
            )
    make_plan_check = _properties(args.properties)
    from pathways_chaos.harness.search.plan import make_plan

    make_plan(0, args.emit_job, args.seed, "check", make_plan_check)
    forwarded: list[str] = ["--profile", args.profile, "--budget", f"{budget:g}"]
    if args.trainer:
        forwarded += ["--trainer", args.trainer]
    if args.loop:
        forwarded += ["--loop", args.loop, "--topology", args.topology]
    if args.properties != build_parser().get_default("properties"):
        forwarded += ["--properties", args.properties]
    if args.examples_per_round is not None:
        forwarded += ["--examples-per-round", str(args.examples_per_round)]
    if args.rounds is not None:
        forwarded += ["--rounds", str(args.rounds)]
    if args.seed is not None:
        forwarded += ["--seed", str(args.seed)]
    if args.no_shrink:
        forwarded.append("--no-shrink")
    options = JobOptions(
        shards=args.emit_job,
        image=args.image or "",
        search_args=tuple(forwarded),
        budget_s=budget,
        name=args.job_name,
        namespace=args.namespace,
        claim=args.claim,
        host_path=args.host_path,
        redis_url=args.redis,
        cpu=parse_cpu(args.cpu),
        memory=parse_memory(args.memory),
        backoff_limit=args.backoff_limit,
        service_account=args.service_account,
        with_merge=not args.shards_only,
    )
    sys.stdout.write(job_yaml(options))
    return 0
