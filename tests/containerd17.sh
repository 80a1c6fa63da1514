#!/usr/bin/env bash
# Fetch containerd 1.7.24 (NRI-capable) from Debian trixie and unpack it into a private cache directory,
# for the NRI integration tests (tests/fixtures/containerd.py).  Debian 12 ships containerd 1.6, which has
# no NRI; trixie's 1.7.24 runs on Debian 12 as is.  Nothing is installed: the deb is unpacked with `dpkg -x`.
#
# The trixie source entry is built at run time from this machine's own Debian entry (same URIs, same
# Signed-By keyring) so no mirror address lives in the repository.  apt runs against a private sources
# dir, lists dir and cache dir under a temporary directory, so the host's apt configuration and package
# lists are never modified and there is nothing to restore afterwards.
#
# Usage: tests/containerd17.sh [CACHE_DIR]   (default ~/.cache/koordlet-tests/containerd-1.7.24)
# Prints the directory holding the `containerd` binary.  A second run with the cache present does nothing.
# Concurrent runs serialise on CACHE_DIR.lock (flock); a caller already holding that lock sets
# KOORDLET_CONTAINERD17_LOCKED=1.
set -euo pipefail

VERSION="1.7.24~ds1-6+deb13u1"
SUITE="trixie"
DEBIAN_SOURCES="${KOORDLET_DEBIAN_SOURCES:-/etc/apt/sources.list.d/debian.sources}"
cache="${1:-${HOME}/.cache/koordlet-tests/containerd-1.7.24}"
bin_dir="${cache}/root/usr/bin"

complete() { [ -x "${bin_dir}/containerd" ] && [ -f "${cache}/.complete" ]; }

mkdir -p "$(dirname "$cache")"
if [ "${KOORDLET_CONTAINERD17_LOCKED:-0}" != "1" ]; then
    exec 9>"${cache}.lock"
    flock 9
fi

if complete; then
    echo "$bin_dir"
    exit 0
fi

if [ ! -r "$DEBIAN_SOURCES" ]; then
    echo "containerd17: no $DEBIAN_SOURCES to build the $SUITE entry from" >&2
    exit 2
fi

# The first deb822 stanza that is not the security archive: its URIs and Signed-By.
read -r uris keyring < <(awk '
    BEGIN { RS = ""; FS = "\n" }
    {
        uris = ""; key = ""
        for (i = 1; i <= NF; i++) {
            if ($i ~ /^URIs:/) { uris = $i; sub(/^URIs:[ \t]*/, "", uris) }
            if ($i ~ /^Signed-By:/) { key = $i; sub(/^Signed-By:[ \t]*/, "", key) }
        }
        if (uris != "" && uris !~ /security/) { print uris, key; exit }
    }' "$DEBIAN_SOURCES")
if [ -z "${uris:-}" ]; then
    echo "containerd17: no Debian (non-security) entry in $DEBIAN_SOURCES" >&2
    exit 2
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/koordlet-containerd17.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/sources.list.d" "$work/lists/partial" "$work/cache/archives/partial" "$work/deb"
{
    echo "Types: deb"
    echo "URIs: $uris"
    echo "Suites: $SUITE"
    echo "Components: main"
    if [ -n "${keyring:-}" ]; then echo "Signed-By: $keyring"; fi
} >"$work/sources.list.d/koordlet-tests-$SUITE.sources"

apt_private=(
    -o "Dir::Etc::SourceList=/dev/null"
    -o "Dir::Etc::SourceParts=$work/sources.list.d"
    -o "Dir::State::Lists=$work/lists"
    -o "Dir::Cache=$work/cache"
    # apt drops to the _apt user for downloads, which cannot write into a root-owned mktemp dir.
    -o "APT::Sandbox::User=$(id -un)"
)
echo "containerd17: fetching containerd=$VERSION from $SUITE" >&2
apt-get "${apt_private[@]}" -qq update >&2
(cd "$work/deb" && apt-get "${apt_private[@]}" -qq download "containerd=$VERSION" >&2)

deb="$(find "$work/deb" -maxdepth 1 -name 'containerd_*.deb' | head -n 1)"
if [ -z "$deb" ]; then
    echo "containerd17: apt-get download produced no containerd deb" >&2
    exit 1
fi

rm -rf "$cache"
mkdir -p "$cache"
dpkg -x "$deb" "$cache/root"
cp "$deb" "$cache/"
"$bin_dir/containerd" --version >&2
touch "$cache/.complete"
echo "$bin_dir"
