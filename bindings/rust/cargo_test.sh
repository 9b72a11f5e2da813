#!/bin/bash
# Runs `cargo test --offline` on the Rust workspace as a user would, with
# DISTKIT_LIB_DIR pointing at the built libdistkit.so. Cargo writes into
# $TEST_TMPDIR (HOME is empty in tests).
set -euo pipefail
find_tool="$PWD/$1"
lib_dir="$(cd "$(dirname "$2")" && pwd -P)"
# Cargo wants real files: copy the workspace (and the header the layout test
# compiles against) into the tmpdir, keeping the repository layout.
work="$TEST_TMPDIR/repo"
mkdir -p "$work/bindings" "$work/capi"
cp -rL bindings/rust "$work/bindings/"
cp -rL capi/include "$work/capi/"
export CARGO_HOME="$TEST_TMPDIR/cargo-home" CARGO_TARGET_DIR="$TEST_TMPDIR/target"
export DISTKIT_LIB_DIR="$lib_dir" LD_LIBRARY_PATH="$lib_dir"
cd "$work/bindings/rust"
"$find_tool" cargo test --offline --quiet 2>&1
# The multi-rank check programs are test targets outside the default run
# (they need distrun): build them by name so Cargo still compiles them.
"$find_tool" cargo test --offline --quiet --no-run -p distkit --test collectives_multirank_test --test shrink_multirank_test \
  --test elastic_multirank_test --test gpu_sim_multirank_test \
  --test sharded_elastic_multirank_test 2>&1
echo "cargo test and the multi-rank check programs' build passed"
