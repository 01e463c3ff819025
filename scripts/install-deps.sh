#!/usr/bin/env bash
# Installs the Debian packages Sandloom needs to build, run and test.
# Usage: scripts/install-deps.sh [build|run|test]   (default: test, the superset)
# As root it runs apt-get; otherwise it prints the exact command and exits 1.
set -euo pipefail

tier="${1:-test}"
build_pkgs=(build-essential meson ninja-build pkg-config
            libmicrohttpd-dev libjansson-dev libsqlite3-dev libssl-dev
            libcap-dev libseccomp-dev libarchive-dev libcurl4-openssl-dev libpq-dev
            libmariadb-dev libhiredis-dev libnftables-dev zlib1g-dev python3)
# btrfs-progs: mkfs.btrfs makes the workspace image (SANDBOX_WORKSPACE_IMAGE_BYTES).
# python3-pip: pip in a sandbox's managed environment is the system's pip.
run_pkgs=(btrfs-progs python3-pip)
# chromium: the console's browser test (driven by npm playwright-core with the
# machine's Node.js 20; Debian's own nodejs 18 is too old for it).
# e2fsprogs: the full-filesystem tests make btrfs and ext4 on loop devices.
# golang-go, rustc, cargo, default-jdk-headless, node-typescript: every
# toolchain compiles and runs a program in tests/e2e/test_toolchains.py.
# postgresql, mariadb-server: the store suite and the end-to-end tests run
# again on real servers the tests start themselves (tests/db/run-with-*.sh);
# redis-server: the registry's (tests/db/run-with-redis.sh).
# mypy, python3-venv: the Python SDK is checked with mypy --strict and
# installed with pip into a fresh venv, offline (tests/e2e/test_sdk_python.py).
# tmux: the CLI's progress line is checked on a real terminal (test_cli.py).
# python3-matplotlib: E2B's code interpreter turns a figure into a PNG result
# (tests/e2e/test_e2b_sdk.py draws one inside a sandbox).
# runsc: gVisor's, for the suites that run again with
# SANDBOX_EXECUTION_BACKEND=gvisor (runtime/gvisor.c, tests/e2e/test_gvisor.py).
# nftables, dnsmasq-base, iproute2: the private network tests inspect the
# daemon's nftables table, answer test names with their own dnsmasq and make
# their test internet in a network namespace (tests/e2e/private_net.py).
test_pkgs=(libcmocka-dev python3-pytest curl chromium e2fsprogs
           golang-go rustc cargo default-jdk-headless node-typescript postgresql
           mariadb-server redis-server mypy python3-venv tmux nftables dnsmasq-base
           python3-websockets python3-matplotlib
           iproute2 runsc)

pkgs=("${build_pkgs[@]}")
[ "$tier" = run ] && pkgs+=("${run_pkgs[@]}")
[ "$tier" = test ] && pkgs+=("${run_pkgs[@]}" "${test_pkgs[@]}")

# npm installs Swagger UI for the build (scripts/install-web-deps.sh): the
# machine's own npm if it has one, else Debian's.
command -v npm >/dev/null || pkgs+=(npm)

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "Sandloom needs these Debian packages: ${missing[*]}" >&2
    echo "Run as root:  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
