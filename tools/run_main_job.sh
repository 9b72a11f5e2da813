#!/usr/bin/env bash
# Installs what is missing (tools/bootstrap.sh), builds, and runs the main job:
# a 4-rank job on the local CPUs launched by distrun.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/bootstrap.sh
bazel build //tools/distrun //examples/cc:main_job
exec bazel-bin/tools/distrun/distrun --nproc-per-node "${NPROC:-4}" --master-port 0 \
  --timeout "${TIMEOUT_S:-600}" -- bazel-bin/examples/cc/main_job "$@"
