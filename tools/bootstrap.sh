#!/usr/bin/env bash
# Installs every Debian package distkit needs to build and test. Idempotent: when all
# packages are present it prints nothing and returns in well under a second.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap            # Bazel 4.2.3, WORKSPACE mode
  build-essential
  libabsl-dev
  libgloo-dev
  libopenmpi-dev openmpi-bin
  libtorch-dev python3-torch
  pybind11-dev python3-dev     # the torch c10d extension (bindings/python/c10d)
  libdlpack-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  golang-go
  python3-pytest python3-numpy python3-matplotlib
  clang-format-14
  clang-14 libclang-rt-14-dev  # libFuzzer (tools/fuzz)
  cmake ninja-build dpkg-dev   # Abseil built with TSan (tools/tsan)
  pkg-config iproute2 procps
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Rust comes from the machine's toolchain (rustup in ~/.cargo); nothing to install.
