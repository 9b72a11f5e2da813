#!/bin/sh
# Stands in for a GPU test when CUDA or NCCL was not found at build time.
echo "SKIPPED: $1"
echo "(the GPU targets build when CUDA and NCCL are installed; see third_party/system_libs.bzl)"
exit 0
