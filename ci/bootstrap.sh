#!/usr/bin/env bash
# Installs pathways-chaos into ./.venv on a fresh machine: finds a Python >= 3.12 (PATH, then
# pyenv), creates the venv (or reuses one cached for the same pyproject.toml and Python),
# installs the project editable with its dev tools; with --kube it
# builds or reuses the local Kubernetes binaries (ci/build-kube-binaries.sh), with --browser it
# installs Debian's headless Chromium (the HTML report's rendering test), with --redis Debian's
# redis-server (the search's shared example database; its tests start one on a loopback port).
set -euo pipefail
cd "$(dirname "$0")/.."

want_kube=0
want_browser=0
want_redis=0
for arg in "$@"; do
  case "$arg" in
    --kube) want_kube=1 ;;
    --browser) want_browser=1 ;;
    --redis) want_redis=1 ;;
    *) echo "bootstrap.sh: unknown option $arg (use --kube, --browser, --redis)" >&2; exit 2 ;;
  esac
done

find_python() {
  local candidates=(python3.13 python3.12 python3)
  for c in "${candidates[@]}"; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
  if command -v pyenv >/dev/null 2>&1; then
    local v
    for v in $(pyenv versions --bare 2>/dev/null | grep -E '^3\.1[2-9]' | sort -V -r); do
      local p; p="$(pyenv root)/versions/$v/bin/python"
      if [ -x "$p" ]; then echo "$p"; return 0; fi
    done
  fi
  return 1
}

check_install() {
  .venv/bin/python -c 'import pathways_chaos.harness.pytest_plugin.plugin, jax, pathwaysutils, orbax.checkpoint, grain, pytest, xdist, hypothesis, kubernetes; print("bootstrap.sh: installed, jax", jax.__version__)'
}

# A fresh clone reuses a venv cached for the same pyproject.toml and Python (hard links, well
# under a second, against ~45 s for pip to unpack jaxlib and friends again); pip never writes
# an installed file in place, so the cache is not changed through the links. The clone's own
# editable install is redone. Anything odd falls back to a full install.
CACHE=${PATHWAYS_CHAOS_CACHE:-$HOME/.cache/pathways-chaos}
here="$(pwd -P)"

restore_cached_venv() {
  local entry="$1" origin
  [ -f "$entry/.complete" ] || return 1
  origin="$(cat "$entry/.origin")"
  cp -al "$entry/venv" .venv 2>/dev/null || cp -a "$entry/venv" .venv || return 1
  # Scripts name their interpreter by absolute path: point them at this clone's .venv.
  grep -rlI -- "$origin" .venv/bin | while read -r f; do
    sed "s|$origin|$here/.venv|g" "$f" > "$f.new" && chmod --reference="$f" "$f.new" && mv "$f.new" "$f"
  done
  .venv/bin/python -m pip install -q --no-deps -e . && check_install
}

save_venv_to_cache() {
  local entry="$1" tmp
  mkdir -p "$CACHE/venvs"
  tmp="$(mktemp -d "$CACHE/venvs/.new-XXXXXX")"
  cp -al .venv "$tmp/venv" 2>/dev/null || cp -a .venv "$tmp/venv"
  echo "$here/.venv" > "$tmp/.origin"
  touch "$tmp/.complete"
  mv -T "$tmp" "$entry" 2>/dev/null || rm -rf "$tmp"  # another bootstrap got there first
}

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
  py="$(find_python)" || { echo "bootstrap.sh: no Python >= 3.12 found (install python3.12 or pyenv install 3.12)" >&2; exit 1; }
  key="$( { cat pyproject.toml; "$py" -VV; echo "$py"; } | sha256sum | cut -c1-16)"
  entry="$CACHE/venvs/$key"
  use_cache=1
  [ "${PATHWAYS_CHAOS_NO_VENV_CACHE:-}" = 1 ] && use_cache=0
  rm -rf .venv
  if [ "$use_cache" = 1 ] && restore_cached_venv "$entry"; then
    echo "bootstrap.sh: reused the cached venv $entry"
  else
    rm -rf .venv
    if [ "$use_cache" = 1 ] && [ -d "$entry" ]; then  # it did not work: build it again
      echo "bootstrap.sh: the cached venv $entry did not work; installing from scratch"
      rm -rf "$entry"
    fi
    echo "bootstrap.sh: creating .venv with $py"
    "$py" -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e '.[dev]'
    check_install
    [ "$use_cache" = 0 ] || save_venv_to_cache "$entry"
  fi
else
  .venv/bin/python -m pip install -q -e '.[dev]'  # an existing venv: bring it up to pyproject
  check_install
fi

# build/typed: the package laid out as it installs (symlinks), for plain mypy, pyright and an
# IDE in this checkout (pyproject's mypy_path and extraPaths name it).
.venv/bin/python ci/typecheck.py --view >/dev/null

if [ "$want_browser" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
  echo "bootstrap.sh: installing Debian's chromium"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

if [ "$want_redis" = 1 ] && ! command -v redis-server >/dev/null 2>&1; then
  echo "bootstrap.sh: installing Debian's redis-server (not started: tests start their own)"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  # Debian's package starts a system service where one runs; the tests need only the binary.
  (command -v systemctl >/dev/null 2>&1 && systemctl disable --now redis-server >/dev/null 2>&1) || true
fi

if [ "$want_kube" = 1 ]; then
  bin="$(bash ci/build-kube-binaries.sh | tail -n 1)"
  echo "bootstrap.sh: Kubernetes binaries in $bin"
fi
