#!/bin/bash
# Build (once) and print the folder holding kube-apiserver, kube-controller-manager,
# kube-scheduler 1.20.2 and etcd for the local control plane the `kube` tests run against.
#
# Why from source: no registry ships a prebuilt kube-apiserver, but Debian bookworm's
# `kubernetes` source package (full vendor tree) builds offline with Debian's Go 1.19.
# Why a cache outside the repo: the build takes ~7 minutes and 3 GB; the binaries are reused.
#
# Order of preference (envtest convention):
#   1. $KUBEBUILDER_ASSETS, when it holds kube-apiserver and etcd: used as is, nothing built.
#   2. ${PATHWAYS_CHAOS_CACHE:-$HOME/.cache/pathways-chaos}/kube-1.20.2/bin, when every binary
#      there exists and runs.
#   3. Otherwise build into that folder (needs apt; as root on a fresh machine it installs the
#      few build tools that are missing).
# The last line of output is always the bin folder.
set -euo pipefail

log() { echo "build-kube-binaries: $*" >&2; }

if [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ -x "$KUBEBUILDER_ASSETS/kube-apiserver" ] \
   && [ -x "$KUBEBUILDER_ASSETS/etcd" ]; then
  log "using KUBEBUILDER_ASSETS"
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

VERSION=1.20.2
CACHE=${PATHWAYS_CHAOS_CACHE:-$HOME/.cache/pathways-chaos}
PREFIX="$CACHE/kube-$VERSION"
BIN="$PREFIX/bin"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler etcd)

binaries_work() {
  local b
  for b in "${BINARIES[@]}"; do
    [ -x "$BIN/$b" ] || return 1
  done
  "$BIN/kube-apiserver" --version 2>/dev/null | grep -q "v$VERSION" || return 1
  "$BIN/kube-controller-manager" --version >/dev/null 2>&1 || return 1
  "$BIN/kube-scheduler" --version >/dev/null 2>&1 || return 1
  "$BIN/etcd" --version >/dev/null 2>&1 || return 1
}

if binaries_work; then
  log "reusing cached binaries"
  echo "$BIN"
  exit 0
fi

mkdir -p "$PREFIX"
# One build at a time: a second caller waits, then finds the binaries in place.
exec 9>"$PREFIX/.build.lock"
flock 9
if binaries_work; then
  log "built by a concurrent run; reusing"
  echo "$BIN"
  exit 0
fi

T0=$(date +%s)
WORK="$PREFIX/build"
rm -rf "$WORK"
mkdir -p "$WORK"/{apt/lists/partial,debs,root,src,home}
cd "$WORK"

# Build tools. A fresh Debian image may lack them; install only what is missing (root only).
# Go and etcd are not installed system-wide: their debs are unpacked into the build folder.
need=()
command -v make >/dev/null || need+=(make)
command -v dpkg-source >/dev/null || need+=(dpkg-dev)
command -v xz >/dev/null || need+=(xz-utils)
command -v openssl >/dev/null || need+=(openssl)  # the control plane fixture makes its SA key
[ -e /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
if [ "$(id -u)" = 0 ]; then
  log "apt-get update"
  apt-get update -qq
  if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
elif [ ${#need[@]} -gt 0 ]; then
  log "missing ${need[*]} and not root: install them or set KUBEBUILDER_ASSETS"
  exit 1
fi

# deb-src index for bookworm in a private apt state folder: /etc/apt is left untouched even
# when the system sources carry no deb-src line.
cat > apt/sources.list <<'EOF'
deb-src http://deb.debian.org/debian bookworm main
deb-src http://deb.debian.org/debian-security bookworm-security main
EOF
APTO=(-o Dir::Etc::SourceList="$WORK/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
      -o Dir::State::Lists="$WORK/apt/lists")
log "fetching the kubernetes source package"
apt-get "${APTO[@]}" update -qq
(cd src && apt-get "${APTO[@]}" source --download-only kubernetes -qq 2>&1 \
  | grep -v 'Download is performed unsandboxed' || true)
(cd src && dpkg-source -x --no-check kubernetes_*.dsc k8s >/dev/null)

# Go 1.19, etcd 3.4, rsync (the kube build wants it) and reflect2 1.0.2, unpacked, not installed.
log "fetching Go, etcd, rsync"
(cd debs && apt-get download golang-1.19-go golang-1.19-src etcd-server rsync libpopt0 \
   golang-github-modern-go-reflect2-dev 2>&1 | grep -v 'Download is performed unsandboxed' || true)
for d in debs/*.deb; do dpkg -x "$d" root; done

# The vendored reflect2 v1.0.1 breaks with Go >= 1.18; Debian's 1.0.2 source drops in.
R=src/k8s/vendor/github.com/modern-go/reflect2
rm -rf "$R" && mkdir -p "$R"
cp root/usr/share/gocode/src/github.com/modern-go/reflect2/*.go \
   root/usr/share/gocode/src/github.com/modern-go/reflect2/*.s "$R"/

log "compiling (about 7 minutes on 2 cores)"
(
  export GOROOT="$WORK/root/usr/lib/go-1.19"
  export PATH="$GOROOT/bin:$WORK/root/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$WORK/root/usr/lib/x86_64-linux-gnu"
  export GOPATH="$WORK/src/k8s/.go" GOFLAGS=-mod=vendor GOPROXY=off CGO_ENABLED=0 HOME="$WORK/home"
  export GOCACHE="$WORK/home/go-build"
  cd src/k8s
  mkdir -p .go/src/k8s.io
  [ -L .go/src/k8s.io/kubernetes ] || ln -s ../../.. .go/src/k8s.io/kubernetes
  make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler" >"$WORK/make.log" 2>&1 \
    || { tail -40 "$WORK/make.log" >&2; exit 1; }
)

# Install into bin atomically, so an interrupted build never leaves a half-filled bin folder.
rm -rf "$PREFIX/bin.new"
mkdir -p "$PREFIX/bin.new"
cp src/k8s/_output/bin/kube-apiserver src/k8s/_output/bin/kube-controller-manager \
   src/k8s/_output/bin/kube-scheduler "$PREFIX/bin.new/"
cp root/usr/bin/etcd "$PREFIX/bin.new/etcd"
rm -rf "$BIN"
mv "$PREFIX/bin.new" "$BIN"
cd "$PREFIX"
rm -rf "$WORK"
binaries_work || { log "built binaries do not run"; exit 1; }
log "built in $(( $(date +%s) - T0 )) s"
"$BIN/kube-apiserver" --version >&2
echo "$BIN"
