"""Each static check flags its known-bad snippet at the right line and passes the good one."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pathways_chaos.harness.acceptance import static_checks
from pathways_chaos.harness.acceptance.static_checks import STATIC_CHECKS, load_sources
from pathways_chaos.harness.errors import ChaosConfigError

SAMPLES = Path(__file__).parents[3] / "suites" / "acceptance" / "samples"


def run(tmp_path: Path, check: str, source: str) -> static_checks.CheckResult:
    path = tmp_path / "port.py"
    path.write_text(textwrap.dedent(source).lstrip())
    return STATIC_CHECKS[check](load_sources([path]))


def lines(result) -> list[int]:
    return [int(f.where.rsplit(":", 1)[1]) for f in result.findings]


# (check, known-bad source, the lines it must name, known-good source)
CASES = {
    "process-index": (
        """
        import jax
        shard = jax.process_index()
        ds = data[jax.process_index()::NUM_HOSTS]
        opts = grain.ShardOptions(0, 8)
        if jax.process_index() == 1:
            evaluate()
        """,
        [2, 3, 4, 5],
        """
        import jax
        print("controller", jax.process_index())
        logger.info("process %d", jax.process_index())
        ds = data
        """,
    ),
    "distributed-initialize": (
        """
        import jax
        from jax import distributed
        jax.distributed.initialize()
        distributed.initialize(coordinator_address="10.0.0.1:1234", num_processes=4)
        if ON_PATHWAYS:
            jax.distributed.initialize()
        """,
        [3, 4, 6],
        """
        import jax
        import pathwaysutils
        LEGACY = False
        pathwaysutils.initialize()
        if LEGACY:
            jax.distributed.initialize()  # a branch no run takes
        if False:
            jax.distributed.initialize()
        jax.distributed.initialize()  # pathways-chaos: ignore (the TPU VM launcher only)
        """,
    ),
    "mesh-from-jax-devices": (
        """
        import jax
        import numpy as np
        from jax.sharding import Mesh
        from pathwaysutils.elastic import manager

        def create_mesh(n):
            devices = np.asarray(jax.devices()).reshape(n, -1)
            return Mesh(devices, ("replica", "data"))

        def other():
            return jax.make_mesh((4, 2), ("replica", "data"))
        """,
        [8, 11],
        """
        import jax
        import numpy as np
        from jax.sharding import Mesh
        from pathwaysutils.elastic import manager

        def create_mesh(m):
            devices = np.asarray(m.active_devices).reshape(m.active_slice_count, -1)
            return Mesh(devices, ("replica", "data"))

        def other(m):
            return jax.make_mesh((4, 2), ("r", "d"), devices=m.active_devices)
        """,
    ),
    "cpu-count-workers": (
        """
        import os
        from multiprocessing import cpu_count
        workers = os.cpu_count()
        options = ReadOptions(num_threads=cpu_count() - 1)
        """,
        [3, 4],
        """
        import os
        workers = 4
        print("node cpus", os.cpu_count())
        capped = min(4, os.cpu_count() or 1)
        """,
    ),
    "private-src-import": (
        """
        import orbax.checkpoint._src.path.step
        from pathwaysutils._src import thing
        import orbax.checkpoint as ocp
        x = ocp._src.handlers
        """,
        [1, 2, 4],
        """
        import orbax.checkpoint as ocp
        from pathwaysutils.elastic import manager
        from mylib._src import fine  # not orbax or pathwaysutils
        """,
    ),
    "logging-raise-exceptions": (
        """
        import logging
        logging.raiseExceptions = True
        logging.raiseExceptions = False
        """,
        [3],
        """
        import logging
        logging.raiseExceptions = False
        run_quietly()
        logging.raiseExceptions = True
        """,
    ),
    "elastic-retry-bound": (
        """
        from pathwaysutils.elastic import manager
        from pathwaysutils.elastic.manager import Manager as M

        elastic_manager = manager.Manager()

        @elastic_manager.elastic_retry(minimum_slice_count=1)
        def loop():
            pass

        wrapped = M().elastic_retry(retry_policy=None, poll_interval=5)(loop)
        again = elastic_manager.elastic_retry(None)(loop)
        """,
        [6, 10, 11],
        """
        from pathwaysutils.elastic import manager

        elastic_manager = manager.Manager()
        policy = manager.ElasticRetryLimit(max_attempts=10)

        @elastic_manager.elastic_retry(minimum_slice_count=1, retry_policy=policy)
        def loop():
            pass

        a = elastic_manager.elastic_retry(max_retries=3)(loop)
        b = elastic_manager.elastic_retry(3, minimum_slice_count=None)(loop)
        c = elastic_manager.elastic_retry(**options)(loop)
        """,
    ),
}


def test_elastic_retry_fix_is_the_users_call_bounded(tmp_path):
    result = run(
        tmp_path,
        "elastic-retry-bound",
        """
        @elastic_manager.elastic_retry(minimum_slice_count=1, poll_interval=10)
        def loop():
            pass
        """,
    )
    assert [f.message for f in result.findings] == [
        "elastic_manager.elastic_retry(minimum_slice_count=1, poll_interval=10) has no retry "
        "bound (no retry_policy, no max_retries): write elastic_manager.elastic_retry("
        "minimum_slice_count=1, poll_interval=10, "
        "retry_policy=manager.ElasticRetryLimit(max_attempts=10))"
    ]
    assert "ElasticRetryLimit(max_attempts=10)" in result.fix


def test_the_projects_own_elastic_code_is_bounded():
    """The reference trainer and the good sample pass the check they teach."""
    root = Path(__file__).parents[3]
    files = load_sources([root / "harness" / "reference", SAMPLES / "good_port"])
    result = STATIC_CHECKS["elastic-retry-bound"](files)
    assert result.ok, result.failure_message()


@pytest.mark.parametrize("check", list(CASES))
def test_flags_the_known_bad_sample_at_its_lines(tmp_path, check):
    bad, want_lines, _ = CASES[check]
    result = run(tmp_path, check, bad)
    assert not result.ok
    assert lines(result) == want_lines
    assert all(f.where.rsplit(":", 1)[0].endswith("port.py") for f in result.findings)


@pytest.mark.parametrize("check", list(CASES))
def test_passes_the_known_good_sample(tmp_path, check):
    _, _, good = CASES[check]
    result = run(tmp_path, check, good)
    assert result.ok, result.failure_message()
    assert result.reason == "1 file scanned, nothing found"


def test_every_check_has_a_case():
    assert set(CASES) == set(STATIC_CHECKS)


def test_aliases_are_resolved(tmp_path):
    result = run(
        tmp_path,
        "process-index",
        """
        import jax as j
        from jax import process_index as pid
        a = j.process_index()
        b = pid()
        """,
    )
    assert lines(result) == [3, 4]


def test_purpose_is_named(tmp_path):
    result = run(
        tmp_path,
        "process-index",
        """
        import jax
        loader = Loader(shard_index=jax.process_index())
        key = jax.random.key(jax.process_index())
        if jax.process_index() == 0:
            pass
        """,
    )
    messages = [f.message for f in result.findings]
    assert "picks a data shard" in messages[0]
    assert "initialises state" in messages[1]
    assert len(messages) == 2  # the branch for process 0 runs on the controller
    assert all("under Pathways it is 0" in m for m in messages)


def test_what_means_the_same_on_one_controller_is_not_a_finding(tmp_path):
    """Index 0 of a count of 1 is the whole dataset, a size divided by the count stays
    global, and the branch for process 0 runs once, on the controller (MaxText has over a
    hundred such lines; each was a FAIL)."""
    result = run(
        tmp_path,
        "process-index",
        """
        import jax
        ds = data[jax.process_index()::jax.process_count()]
        opts = grain.ShardOptions(jax.process_index(), jax.process_count())
        opts = grain.ShardOptions(shard_index=jax.process_index(), shard_count=jax.process_count())
        per_host = global_batch // jax.process_count()
        if jax.process_index() == 0:
            save()
        if not jax.process_index():
            log_metrics()
        if jax.process_index() == 0 and step % 10 == 0:
            save()
        """,
    )
    assert result.ok, result.failure_message()
    assert "3 branches for process 0" in result.reason


def test_a_shard_count_fixed_at_the_old_host_count_is_found(tmp_path):
    """The migration article's own pitfall, with no process_index() in sight: it PASSED."""
    result = run(
        tmp_path,
        "process-index",
        """
        import grain
        NUM_HOSTS = 8
        a = grain.ShardOptions(shard_index=0, shard_count=NUM_HOSTS)
        b = grain.ShardOptions(0, 4)
        c = grain.ShardOptions(0, 1)
        """,
    )
    assert lines(result) == [3, 4]
    assert "1/8 of the data" in result.findings[0].message


def test_mesh_check_only_applies_to_elastic_code(tmp_path):
    source = """
    import jax
    from jax.sharding import Mesh
    mesh = Mesh(jax.devices(), ("data",))
    """
    assert run(tmp_path, "mesh-from-jax-devices", source).ok
    result = run(
        tmp_path,
        "mesh-from-jax-devices",
        "import pathwaysutils\n" + textwrap.dedent(source).lstrip(),
    )
    assert lines(result) == [4]


def test_ignore_mark_skips_a_line(tmp_path):
    result = run(
        tmp_path,
        "cpu-count-workers",
        """
        import os
        workers = os.cpu_count()  # pathways-chaos: ignore (sized for the laptop run)
        """,
    )
    assert result.ok


def test_folders_are_walked_and_skip_virtualenvs(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("import os\nn = os.cpu_count()\n")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "b.py").write_text("import os\nn = os.cpu_count()\n")
    result = STATIC_CHECKS["cpu-count-workers"](load_sources([tmp_path]))
    assert [f.where.rsplit("/", 1)[-1] for f in result.findings] == ["a.py:2"]


def test_bad_input_is_one_line_saying_what_to_do(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    with pytest.raises(ChaosConfigError, match=r"broken.py:1: cannot parse .*fix the syntax"):
        load_sources([broken])
    with pytest.raises(ChaosConfigError, match="no such file or folder"):
        load_sources([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ChaosConfigError, match=r"no \.py files found"):
        load_sources([tmp_path / "empty"])


def test_the_sample_ports():
    bad = static_checks.run_static_checks([SAMPLES / "pitfall_port"])
    good = static_checks.run_static_checks([SAMPLES / "good_port"])
    assert [r.check for r in bad if not r.ok] == list(STATIC_CHECKS)
    assert all(r.ok for r in good), [r.failure_message() for r in good if not r.ok]


def test_container_cpu_count_reads_the_cgroup_quota(tmp_path):
    (tmp_path / "cpu.max").write_text("200000 100000\n")
    assert static_checks.container_cpu_count(tmp_path) == min(
        2, len(__import__("os").sched_getaffinity(0))
    )
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert static_checks.container_cpu_count(tmp_path) >= 1


@pytest.mark.parametrize(
    "data",
    [
        b"\xef\xbb\xbfimport jax\nx = jax.process_index()\n",  # a UTF-8 BOM
        b'# -*- coding: latin-1 -*-\nimport jax\ns = "caf\xe9"\nx = jax.process_index()\n',
    ],
    ids=["bom", "pep263-latin-1"],
)
def test_valid_python_in_any_encoding_python_reads_is_checked(tmp_path, data):
    """Both are valid Python; the BOM errored every static row and the latin-1 file ended the
    whole session ("not UTF-8 text")."""
    path = tmp_path / "port.py"
    path.write_bytes(data)
    result = STATIC_CHECKS["process-index"](load_sources([path]))
    assert [f.where.rsplit(":", 1)[1] for f in result.findings] == [str(data.count(b"\n"))]


# -- blind tester 9: an index held in a name, a TPU VM's worker id, the last host -----------
HELD_GOOD = {
    "logged": """
        import logging
        import jax
        rank = jax.process_index()
        logging.info("rank %d of %d", rank, jax.process_count())
        """,
    "branch-for-0": """
        import jax
        def save(obj, path):
            rank = jax.process_index()
            if rank == 0:
                write(path, obj)
        """,
    "separate-vars": """
        import jax
        def host_shard(dataset):
            i = jax.process_index()
            n = jax.process_count()
            return dataset[i::n]
        """,
    "tuple-unpacked": """
        import jax
        def host_batches(dataset):
            n, i = jax.process_count(), jax.process_index()
            per_host = GLOBAL_BATCH // n
            shard = dataset[i::n]
            return shard[:per_host]
        """,
    "walrus-branch-for-0": """
        import jax
        if (rank := jax.process_index()) == 0:
            print("controller", rank)
        """,
    "module-level-name": """
        import jax
        RANK = jax.process_index()
        COUNT = jax.process_count()
        def shard(ds):
            print(f"host {RANK}")
            return grain.ShardOptions(shard_index=RANK, shard_count=COUNT)
        """,
}


@pytest.mark.parametrize("source", HELD_GOOD.values(), ids=list(HELD_GOOD))
def test_an_index_held_in_a_name_is_judged_by_its_reads(tmp_path, source):
    """The inline forms passed; stored in a name first, the assignment line FAILED whatever the
    name was then used for (logged, compared with 0, sliced with the count)."""
    result = run(tmp_path, "process-index", source)
    assert result.ok, result.failure_message()


def test_a_held_index_is_flagged_where_a_read_changes_meaning(tmp_path):
    result = run(
        tmp_path,
        "process-index",
        """
        import jax
        HOSTS = 8
        RANK = jax.process_index()
        def shard(ds):
            return ds[RANK::HOSTS]
        def evaluate():
            rank = jax.process_index()
            print("rank", rank)
            if rank == 1:
                run_evals()
            load(rank)
        def local(RANK):
            return RANK
        """,
    )
    assert lines(result) == [5, 9, 11]
    messages = [f.message for f in result.findings]
    assert messages[0] == (
        "RANK (= jax.process_index(), line 3) picks a data shard: under Pathways it is 0"
    )
    assert "rank (= jax.process_index(), line 7) chooses which process acts" in messages[1]
    # passed to a function the check does not know: a finding, as load(jax.process_index()) is
    assert "rank (= jax.process_index(), line 7) steers the program" in messages[2]


def test_a_held_index_never_read_in_its_scope_is_flagged_where_it_is_stored(tmp_path):
    """No read to judge (a global read by another module, an attribute): the binding is."""
    result = run(
        tmp_path,
        "process-index",
        """
        import jax
        SHARD = jax.process_index()
        class Loader:
            def __init__(self):
                self.shard = jax.process_index()
        """,
    )
    assert lines(result) == [2, 5]


WORKER_IDS = {
    "subscript": 'WORKER_ID = int(os.environ["TPU_WORKER_ID"])',
    "getenv": 'WORKER_ID = int(os.getenv("TPU_WORKER_ID", "0"))',
    "environ-get": 'WORKER_ID = int(os.environ.get("CLOUD_TPU_TASK_ID", 0))',
    "from-os-import": 'WORKER_ID = int(environ.get("MEGASCALE_SLICE_ID", "0"))',
}


@pytest.mark.parametrize("read", WORKER_IDS.values(), ids=list(WORKER_IDS))
def test_a_shard_picked_by_a_tpu_worker_id_fails_naming_the_variable(tmp_path, read):
    """The controller's env has no per-host worker id: it PASSED, as nothing called
    process_index()."""
    result = run(
        tmp_path,
        "process-index",
        f"""
        import os
        from os import environ
        NUM_WORKERS = int(os.environ.get("TPU_WORKER_COUNT", "8"))
        {read}
        def shard(dataset):
            return dataset[WORKER_ID::NUM_WORKERS]
        """,
    )
    assert lines(result) == [6]
    message = result.findings[0].message
    env = read.split('"')[1]
    assert message.startswith(f"WORKER_ID (= {env}, line 4) picks a data shard")
    assert f"the Pathways controller's env has no per-host {env}" in message


def test_a_tpu_worker_id_used_as_process_index_would_pass_is_not_a_finding(tmp_path):
    result = run(
        tmp_path,
        "process-index",
        """
        import os
        import jax
        print("worker", os.environ.get("TPU_WORKER_ID"))
        ds = data[int(os.environ.get("TPU_WORKER_ID", "0"))::jax.process_count()]
        os.environ["TPU_WORKER_ID"] = "0"
        other = os.environ.get("TPU_WORKER_HOSTNAMES")
        """,
    )
    assert result.ok, result.failure_message()


def test_a_branch_for_the_last_process_runs_on_the_controller(tmp_path):
    """0 == 1 - 1 on one controller; it FAILED as "chooses which process acts"."""
    result = run(
        tmp_path,
        "process-index",
        """
        import jax
        def maybe_write(summary, path):
            if jax.process_index() == jax.process_count() - 1:
                write(path, summary)
            rank, n = jax.process_index(), jax.process_count()
            if rank == n - 1:
                write(path, summary)
        """,
    )
    assert result.ok, result.failure_message()
    assert "2 branches for process 0" in result.reason


def test_a_branch_for_another_fixed_process_is_still_found(tmp_path):
    result = run(
        tmp_path,
        "process-index",
        """
        import jax
        NUM_HOSTS = 4
        if jax.process_index() == NUM_HOSTS - 1:
            write()
        if jax.process_index() == jax.process_count() - 2:
            write()
        """,
    )
    assert lines(result) == [3, 5]
    assert all("chooses which process acts" in f.message for f in result.findings)


# -- blind tester 9: minimum_slice_count from another module of the sources -----------------
CONFIG_IMPORTS = {
    "from-package-import": ("from mtx import configs", "configs.MIN_SLICES"),
    "import-module": ("import mtx.configs", "mtx.configs.MIN_SLICES"),
    "from-module-import": ("from mtx.configs import MIN_SLICES", "MIN_SLICES"),
    "relative-module": ("from . import configs as c", "c.MIN_SLICES"),
    "relative-name": ("from .configs import MIN_SLICES as M", "M"),
}


def _package(tmp_path: Path, configs: str, imported: str, minimum: str) -> list:
    package = tmp_path / "mtx"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "configs.py").write_text(f"from typing import Final\n{configs}\n")
    (package / "train.py").write_text(
        f"{imported}\n"
        "from pathwaysutils.elastic import manager\n"
        "m = manager.Manager()\n"
        f"@m.elastic_retry(minimum_slice_count={minimum}, "
        "retry_policy=manager.ElasticRetryLimit(3))\n"
        "def loop():\n    pass\n"
    )
    return load_sources([tmp_path])


@pytest.mark.parametrize("imported", CONFIG_IMPORTS.values(), ids=list(CONFIG_IMPORTS))
def test_a_minimum_slice_count_from_another_module_is_read(tmp_path, imported):
    """``minimum_slice_count=configs.MIN_SLICES`` (3, of 2 slices) PASSED: "no constant"."""
    from pathways_chaos.harness.acceptance.manifest_checks import load_manifest

    manifest = load_manifest(SAMPLES / "good_port" / "jobset.yaml")  # 2 worker slices
    files = _package(tmp_path, "MIN_SLICES: Final[int] = 3", *imported)
    row = static_checks.check_minimum_slice_count(files, manifest)
    assert row.status == "FAIL", row.reason
    assert "elastic_retry(minimum_slice_count=3) waits for 3 slices" in row.reason
    assert row.findings[0].where.endswith("train.py:4")


def test_a_minimum_slice_count_the_check_cannot_read_is_said_in_the_reason(tmp_path):
    from pathways_chaos.harness.acceptance.manifest_checks import load_manifest

    manifest = load_manifest(SAMPLES / "good_port" / "jobset.yaml")
    configs = 'MIN_SLICES = int(os.environ.get("MIN_SLICES", "3"))'
    row = static_checks.check_minimum_slice_count(
        _package(tmp_path, configs, "from mtx import configs", "configs.MIN_SLICES"), manifest
    )
    assert row.status == "PASS"
    assert "not read (computed at run time, the run shows it): " in row.reason
    assert "minimum_slice_count=configs.MIN_SLICES (" in row.reason
    (tmp_path / "mtx" / "configs.py").write_text("MIN_SLICES = 2\n")
    row = static_checks.check_minimum_slice_count(load_sources([tmp_path]), manifest)
    assert row.status == "PASS" and "minimum_slice_count=2 (" in row.reason


def test_a_helper_asking_am_i_the_controller_is_not_a_finding(tmp_path):
    """A blind tester's correct port: ``is_chief()`` returning ``process_index() == 0`` (or
    the last process) is the branch for process 0 written the usual way."""
    result = run(
        tmp_path,
        "process-index",
        """
        import jax
        def is_chief():
            return jax.process_index() == 0
        def is_last():
            return jax.process_index() == jax.process_count() - 1
        writer = jax.process_index() != 0
        shard = jax.process_index() + 1
        """,
    )
    assert lines(result) == [7], result.findings


def test_a_per_host_id_compared_with_0_is_a_guard_only_when_the_controller_can_read_it(tmp_path):
    """The controller's env has no TPU_WORKER_ID: ``int(os.environ["TPU_WORKER_ID"]) == 0``
    raises there, while a read with a default gives the controller 0, its branch."""
    result = run(
        tmp_path,
        "process-index",
        """
        import os
        def is_chief():
            return int(os.environ["TPU_WORKER_ID"]) == 0
        def is_first():
            return int(os.environ.get("TPU_WORKER_ID", 0)) == 0
        """,
    )
    assert lines(result) == [3], result.findings


def test_a_mesh_helper_in_a_module_elastic_code_imports_is_checked(tmp_path):
    """A blind tester's broken port: the mesh helper kept in ``partitioning.py`` (no Pathways
    import there), called from the elastic loop, passed."""
    package = tmp_path / "src" / "t5x_port"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "partitioning.py").write_text(
        "import jax\nimport numpy as np\nfrom jax.sharding import Mesh\n\n\n"
        "def make_mesh(n):\n"
        "    return Mesh(np.asarray(jax.devices()).reshape(n, -1), ('replica', 'data'))\n\n\n"
        "def unused(n):\n"
        "    return jax.make_mesh((n, 2), ('replica', 'data'))\n"
    )
    (package / "train.py").write_text(
        "from pathwaysutils.elastic import manager\n"
        "from t5x_port.partitioning import make_mesh as build\n\n"
        "mgr = manager.Manager()\n"
    )
    (tmp_path / "src" / "eval.py").write_text(  # not elastic: a fixed mesh is right there
        "import jax\nfrom t5x_port.partitioning import unused\n"
    )
    result = STATIC_CHECKS["mesh-from-jax-devices"](load_sources([tmp_path / "src"]))
    assert [f.where.rsplit("/", 1)[-1] for f in result.findings] == ["partitioning.py:7"]
    (finding,) = result.findings
    assert "t5x_port.partitioning.make_mesh()" in finding.message and "as build" in finding.message
    # the module imported whole and its helper called through it
    (package / "train.py").write_text(
        "from pathwaysutils.elastic import manager\n"
        "from t5x_port import partitioning\n\n"
        "mesh = partitioning.make_mesh(2)\n"
    )
    result = STATIC_CHECKS["mesh-from-jax-devices"](load_sources([tmp_path / "src"]))
    (finding,) = result.findings
    assert "calls at line 4" in finding.message, finding


def test_a_finding_in_a_branch_on_a_flag_says_how_to_mark_a_legacy_path(tmp_path):
    """A port keeping its multi-controller path behind a run-time flag: the static check
    cannot know the flag, so the finding names the branch and the mark that says it never
    runs on Pathways; with the mark, nothing is found."""
    source = """
        import os
        import jax
        ON_PATHWAYS = os.environ.get("PATHWAYS", "1") == "1"
        if not ON_PATHWAYS:
            jax.distributed.initialize(){mark}
        """
    result = run(tmp_path, "distributed-initialize", source.format(mark=""))
    (finding,) = result.findings
    assert "in the branch taken when not ON_PATHWAYS, line 4" in finding.message
    assert "# pathways-chaos: ignore" in finding.message
    marked = run(
        tmp_path, "distributed-initialize", source.format(mark="  # pathways-chaos: ignore")
    )
    assert marked.ok, marked.findings


@pytest.mark.parametrize(
    ("test", "noted"),
    [
        ("not ON_PATHWAYS", True),
        ("cfg.multi_controller", True),
        ('MODE == "multi_controller"', True),
        ('__name__ == "__main__"', False),
        ("step % log_every == 0", False),
    ],
)
def test_only_a_branch_on_a_setting_gets_the_ignore_mark_note(tmp_path, test, noted):
    """Under ``if __name__ == "__main__":`` (the usual home of the call) the note would invite
    a user to silence a real finding."""
    result = run(
        tmp_path,
        "distributed-initialize",
        f"import jax\nif {test}:\n    jax.distributed.initialize()\n",
    )
    (finding,) = result.findings
    assert ("pathways-chaos: ignore" in finding.message) is noted, finding


def test_a_mesh_helper_taking_the_devices_is_judged_at_each_call(tmp_path):
    """MaxText's ``create_device_mesh(config, devices=None)`` falls back to jax.devices() only
    when a caller leaves the devices out: an elastic caller passing its active devices is
    right, one leaving them out is found."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "maxtext_utils.py").write_text(
        "import jax\nimport numpy as np\nfrom jax.sharding import Mesh\n\n\n"
        "def create_device_mesh(config, devices=None):\n"
        "    if devices is None:\n"
        "        devices = jax.devices()\n"
        "    return Mesh(np.asarray(devices).reshape(2, -1), ('replica', 'data'))\n"
    )
    train = src / "train.py"
    train.write_text(
        "from pathwaysutils.elastic import manager\n"
        "from maxtext_utils import create_device_mesh\n"
        "mgr = manager.Manager()\n"
        "mesh = create_device_mesh(cfg, devices=mgr.active_devices)\n"
        "other = create_device_mesh(cfg, mgr.active_devices)\n"
    )
    assert STATIC_CHECKS["mesh-from-jax-devices"](load_sources([src])).ok
    train.write_text(train.read_text() + "bare = create_device_mesh(cfg)\n")
    (finding,) = STATIC_CHECKS["mesh-from-jax-devices"](load_sources([src])).findings
    assert "calls without its devices at line 6" in finding.message, finding
