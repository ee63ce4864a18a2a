#!/usr/bin/env bash
# Builds a real kube-apiserver v1.20.2 from Debian's `kubernetes` source package, once per machine, and
# prints the binary's path on stdout (progress goes to stderr). No registry ships an apiserver binary, and
# the operator's tests need a real one (CRD schemas, RBAC, TokenRequest). Also makes sure etcd is installed.
#
#   scripts/kube-apiserver.sh            # build if not cached, print the path
#   scripts/kube-apiserver.sh --rebuild  # build again even if cached
#
# The cache lives outside the clone (AGENTFN_KUBE_CACHE, default /var/cache/agentfn) so every fresh clone
# on this machine reuses it. A first build takes about 8 minutes on 2 cores. Needs root (apt).
set -euo pipefail

VERSION=1.20.2
DEB_VERSION=1.20.5+really1.20.2-1.1+deb12u1
CACHE="${AGENTFN_KUBE_CACHE:-/var/cache/agentfn}/kube-apiserver-v$VERSION"
BIN="$CACHE/kube-apiserver"
PACKAGES=(golang-1.19-go rsync etcd-server golang-github-modern-go-reflect2-dev dpkg-dev)

log() { echo "[kube-apiserver] $*" >&2; }

missing_packages() {
    local p
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || echo "$p"
    done
}

ensure_packages() {
    local missing
    missing=$(missing_packages)
    [ -z "$missing" ] && return 0
    log "installing: $missing"
    apt-get update >&2
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing >&2
    # etcd-server's maintainer script may start a system etcd; the tests run their own on free ports.
}

build() {
    local work="$CACHE/build" apt="$CACHE/apt"
    rm -rf "$work"
    mkdir -p "$work" "$apt/sources.list.d" "$apt/lists/partial"

    # The machine's sources are deb822 with `Types: deb` only: give apt a private copy that also has
    # deb-src, with its own lists, so the system's apt state is left as it was.
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        sed 's/^Types:[[:space:]]*deb[[:space:]]*$/Types: deb deb-src/' "$f" >"$apt/sources.list.d/$(basename "$f")"
    done
    local opts=(-o "Dir::Etc::SourceParts=$apt/sources.list.d" -o "Dir::Etc::SourceList=/dev/null"
        -o "Dir::State::Lists=$apt/lists")
    log "apt-get update (private deb-src lists)"
    apt-get "${opts[@]}" update >&2
    log "apt-get source kubernetes=$DEB_VERSION"
    (cd "$work" && apt-get "${opts[@]}" source "kubernetes=$DEB_VERSION" >&2)

    local src
    src=$(find "$work" -maxdepth 1 -mindepth 1 -type d -name 'kubernetes-*' | head -1)
    [ -n "$src" ] || { log "no source tree after apt-get source"; exit 1; }

    # The vendored reflect2 1.0.1 crashes under Go >= 1.18 on the first custom-resource write; Debian's
    # 1.0.2 is the fix. modules.txt keeps its line, so `-mod=vendor` still agrees with go.mod.
    log "replacing vendored modern-go/reflect2 with Debian's 1.0.2"
    rm -rf "$src/vendor/github.com/modern-go/reflect2"
    cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 "$src/vendor/github.com/modern-go/reflect2"

    log "make WHAT=cmd/kube-apiserver (about 8 minutes on 2 cores)"
    (
        cd "$src"
        export PATH="/usr/lib/go-1.19/bin:$PATH" GOFLAGS=-mod=vendor GOCACHE="$CACHE/gocache"
        export KUBE_GIT_VERSION="v$VERSION" KUBE_GIT_TREE_STATE=clean KUBE_BUILD_PLATFORMS=linux/amd64
        nice -n 10 make WHAT=cmd/kube-apiserver >&2
    )
    local out
    out=$(find "$src/_output" -type f -name kube-apiserver -perm -u+x | head -1)
    [ -n "$out" ] || { log "build produced no kube-apiserver"; exit 1; }
    install -m 0755 "$out" "$BIN.tmp"
    mv "$BIN.tmp" "$BIN"
    rm -rf "$work" "$CACHE/gocache"
    log "built $BIN"
}

mkdir -p "$CACHE"
# One build at a time per machine: concurrent test runs wait for the first.
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
    log "another build holds $CACHE/.lock; waiting"
    flock 9
fi

ensure_packages
if [ -x "$BIN" ] && [ "${1:-}" != "--rebuild" ]; then
    log "cached: $BIN"
else
    build
fi
echo "$BIN"
