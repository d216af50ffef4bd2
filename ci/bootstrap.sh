#!/usr/bin/env bash
# Installs pathways-chaos into ./.venv on a fresh machine: finds a Python >= 3.12 (PATH, then
# pyenv), creates the venv, installs the project editable with its dev tools; with --kube it
# builds or reuses the local Kubernetes binaries (ci/build-kube-binaries.sh), with --browser it
# installs Debian's headless Chromium (the HTML report's rendering test).
set -euo pipefail
cd "$(dirname "$0")/.."

want_kube=0
want_browser=0
for arg in "$@"; do
  case "$arg" in
    --kube) want_kube=1 ;;
    --browser) want_browser=1 ;;
    *) echo "bootstrap.sh: unknown option $arg (use --kube, --browser)" >&2; exit 2 ;;
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

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
  py="$(find_python)" || { echo "bootstrap.sh: no Python >= 3.12 found (install python3.12 or pyenv install 3.12)" >&2; exit 1; }
  echo "bootstrap.sh: creating .venv with $py"
  rm -rf .venv
  "$py" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
.venv/bin/python -c 'import pathways_chaos.harness.pytest_plugin.plugin, jax, pathwaysutils, orbax.checkpoint, grain; print("bootstrap.sh: installed, jax", jax.__version__)'

if [ "$want_browser" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
  echo "bootstrap.sh: installing Debian's chromium"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

if [ "$want_kube" = 1 ]; then
  bin="$(bash ci/build-kube-binaries.sh | tail -n 1)"
  echo "bootstrap.sh: Kubernetes binaries in $bin"
fi
