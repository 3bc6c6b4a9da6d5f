#!/usr/bin/env bash
# Installs what the real node in the test harness (test/realnode)
# needs from Debian, and only what is missing: containerd (+ ctr), runc, the
# CNI plugins (bridge, host-local, loopback), iptables (the bridge plugin
# calls it), iproute2 (ip link, ip addr) and util-linux (nsenter); and
# qemu-user, whose qemu-aarch64 runs the release's arm64 builds
# (hack/ko-resolve.sh).
# CI starts from a machine with only Go, so the e2e scripts call this. When
# everything is there it runs no apt at all and takes a few milliseconds.
set -o errexit -o nounset -o pipefail

# package -> a file the package installs that the harness uses.
declare -A need=(
  [containerd]=/usr/bin/containerd
  [runc]=/usr/sbin/runc
  [containernetworking-plugins]=/usr/lib/cni/bridge
  [iptables]=/usr/sbin/iptables
  [iproute2]=/usr/sbin/ip
  [util-linux]=/usr/bin/nsenter
  [qemu-user]=/usr/bin/qemu-aarch64
)

missing=()
for pkg in "${!need[@]}"; do
  [[ -x "${need[${pkg}]}" ]] || missing+=("${pkg}")
done
((${#missing[@]} == 0)) && exit 0

if ((EUID != 0)); then
  echo "node-deps: missing ${missing[*]}, and installing them needs root" >&2
  exit 1
fi
echo "node-deps: installing ${missing[*]} (apt-get install --no-install-recommends)" >&2
export DEBIAN_FRONTEND=noninteractive
# An install from an empty or stale package list fails with "Unable to locate
# package": refresh once and try again.
if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; then
  echo "node-deps: apt-get update first" >&2
  apt-get update -q >&2
  apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi
for pkg in "${missing[@]}"; do
  if [[ ! -x "${need[${pkg}]}" ]]; then
    echo "node-deps: ${pkg} installed but ${need[${pkg}]} is still missing" >&2
    exit 1
  fi
done
