"""``pathways-chaos search``: every bad input is one line and exit 2, before JAX starts."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import pytest

from pathways_chaos.harness.cli.main import main


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["search", *args])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shards", "4", "--out", "{tmp}/o"], "no shard index: pass --shard INDEX/4"),
        (["--shard", "1/4"], "--out DIR is missing"),
        (["--shard", "5/4", "--out", "{tmp}/o"], "outside 0..3"),
        (["--out", "{tmp}/file"], "exists and is not a folder"),
        (["--out", "{tmp}/o", "--redis", "redis://127.0.0.1:1/0"], "cannot reach it"),
        (["--out", "{tmp}/o", "--redis", "127.0.0.1:6379"], "write a URL"),
        (["--out", "{tmp}/o", "--database", "{tmp}/file"], "is not a folder"),
        (["--out", "{tmp}/o", "--trainer", "a:B", "--loop", "c:d"], "give one"),
        (["--out", "{tmp}/o", "--properties", "dataset,replay"], "use some of"),
        (["--out", "{tmp}/o", "--examples-per-round", "0"], "--examples-per-round"),
    ],
)
def test_bad_input_is_one_line_before_jax(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "file").write_text("")
    code, out, err = _run(*(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert code == 2 and out == "", err
    assert message in err and err.strip().count("\n") == 0, err


def test_jax_is_not_imported_by_a_bad_search() -> None:
    import subprocess

    code = (
        "import sys; from pathways_chaos.harness.cli.main import main; "
        "rc = main(['search', '--shards', '2', '--out', 'o']); "
        "sys.exit(10 if 'jax' in sys.modules else rc)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
