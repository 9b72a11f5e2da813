#!/usr/bin/env bash
# Installs what is missing (tools/bootstrap.sh) and runs every test:
# `bazel test //...`, then the ABI's tests again under ASan + UBSan, the
# concurrent parts under TSan, the fuzzers and the GPU check.
# This is the README's test command and what CI (.ci/run) runs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/bootstrap.sh
bazel test //... "$@"
# The C ABI (its misuse tests included), the layers under it and the training
# engines (gradient reducer, sharded unit) once more, under AddressSanitizer
# and UndefinedBehaviorSanitizer.
bazel test --config=asan //capi/... //cc/core/... //cc/comm/... //cc/parallel/... "$@"
# ThreadSanitizer over the store, async work, the op queue and the reducer,
# with Abseil's locks built for TSan (tools/tsan/run_tsan.sh; a few minutes).
tools/tsan/run_tsan.sh "$@"
# libFuzzer targets (clang-14): the store's request handling, the tensor
# argument checks and the C ABI, 20 s each (tools/fuzz/run_fuzzers.sh N for
# longer runs).
tools/fuzz/run_fuzzers.sh 20
# The GPU paths built without Bazel, as on a GPU machine (tools/gpu_check.sh;
# without a GPU it only builds and says so).
tools/gpu_check.sh
