#!/usr/bin/env bash
# Installs what is missing (tools/bootstrap.sh) and runs every test:
# `bazel test //...`, then the sanitizer build of the ABI tests when present.
# This is the README's test command and what CI (.ci/run) runs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/bootstrap.sh
bazel test //... "$@"
