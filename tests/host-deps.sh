#!/usr/bin/env bash
# Install the Debian packages the integration tests drive for real: containerd + runc (the CRI backend of
# the runtime proxy), busybox-static (the one binary in the locally built test image), iproute2, ipset and
# iptables (network QoS inside the tests' own network namespaces), tmux (a real terminal for `koordctl top`,
# tests/integration/koordctl), kubectl when none is on PATH (Debian's kubernetes-client;
# tests/integration/manifests renders manifests/ with `kubectl kustomize`), and the v2 guest's qemu and
# kernel (qemu-system-x86, linux-image-amd64; tests/vm boots it with virtme-ng, whose initramfs is busybox).
#
# As root: `apt-get update` once, then `apt-get install` of whatever is missing; nothing when all are
# installed.  Not root: print what is missing and carry on - the integration tests skip then, and under
# CI=true a skipped integration test fails the run (tests/conftest.py).
set -euo pipefail

packages=(containerd runc busybox-static iproute2 ipset iptables tmux zsh qemu-system-x86 linux-image-amd64)
# Any kubectl will do (a newer one from elsewhere is kept); only a host without one gets Debian's.
command -v kubectl >/dev/null 2>&1 || packages+=(kubernetes-client)

if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "host-deps: not a Debian-based host (no dpkg-query); install by hand: ${packages[*]}"
    exit 0
fi

bash "$(dirname "$0")/containerd17.sh" >/dev/null || echo "host-deps: containerd 1.7 (NRI tests) not fetched"
missing=()
for pkg in "${packages[@]}"; do
    # `dpkg -s` also succeeds for removed packages whose config files remain; ask for the real state.
    if [ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null)" != "installed" ]; then
        missing+=("$pkg")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "host-deps: already installed: ${packages[*]}"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "host-deps: not root, not installing; missing: ${missing[*]} (integration tests needing them will skip)"
    exit 0
fi

echo "host-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "host-deps: installed ${missing[*]}"
