"""The persistent compilation cache: in a folder the user owns alone, never over the user's own
JAX setting, and not at all in a session that does not use the plugin."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pathways_chaos.harness.engine import compilation_cache
from pathways_chaos.harness.errors import ChaosConfigError


def test_the_folder_is_the_users_cache_unless_named_or_off(monkeypatch, tmp_path):
    monkeypatch.delenv(compilation_cache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compilation_cache.cache_dir() == tmp_path / "pathways-chaos" / "xla"
    monkeypatch.setenv(compilation_cache.ENV, str(tmp_path / "mine"))
    assert compilation_cache.cache_dir() == tmp_path / "mine"
    monkeypatch.setenv(compilation_cache.ENV, "off")
    assert compilation_cache.cache_dir() is None


def test_a_folder_others_may_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ChaosConfigError, match=r"not this user's alone.*chmod 700"):
        compilation_cache.check_safe(shared)
    fresh = tmp_path / "fresh" / "xla"
    compilation_cache.check_safe(fresh)
    assert fresh.stat().st_mode & 0o777 == 0o700


def _session(tmp_path: Path, test: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_it.py").write_text(test)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_", "PYTEST_"))}
    clean.pop(compilation_cache.ENV, None)
    clean.update(XDG_CACHE_HOME=str(tmp_path / "cache"), **env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_it.py"],
        cwd=tmp_path,
        env=clean,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_only_a_session_that_uses_the_plugin_gets_the_cache(tmp_path):
    plain = _session(
        tmp_path,
        "import os\n"
        "def test_plain():\n"
        "    assert 'JAX_COMPILATION_CACHE_DIR' not in os.environ\n"
        "    import jax\n"
        "    assert jax.config.jax_compilation_cache_dir is None\n",
    )
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert not (tmp_path / "cache" / "pathways-chaos").exists()
    ours = _session(
        tmp_path,
        "import pytest\n"
        "@pytest.mark.chaos\n"
        "def test_ours():\n"
        "    import jax\n"
        "    assert jax.config.jax_compilation_cache_dir.endswith('pathways-chaos/xla')\n",
    )
    assert ours.returncode == 0, ours.stdout + ours.stderr
    assert (tmp_path / "cache" / "pathways-chaos" / "xla").is_dir()


def test_the_users_own_jax_cache_setting_wins(tmp_path):
    theirs = tmp_path / "theirs"
    out = _session(
        tmp_path,
        "import pytest\n"
        "@pytest.mark.chaos\n"
        "def test_ours():\n"
        "    import jax\n"
        f"    assert jax.config.jax_compilation_cache_dir == {str(theirs)!r}\n",
        JAX_COMPILATION_CACHE_DIR=str(theirs),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert not (tmp_path / "cache" / "pathways-chaos").exists()
