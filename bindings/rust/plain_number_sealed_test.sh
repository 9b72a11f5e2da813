#!/bin/bash
# distkit::PlainNumber is sealed: a user's impl of it does not compile
# (distkit/tests/compile_fail/plain_number_impl.rs), while the same file
# without the impls does (so the failure is the seal, not the file).
# Args: find_tool.sh, libdistkit.rlib, libdistkit_sys.rlib, the source.
set -uo pipefail
find_tool="$1" distkit="$2" sys="$3" src="$4"
out="${TEST_TMPDIR:-$(mktemp -d)}"
compile() {
  "$find_tool" rustc --edition 2021 --crate-type lib --crate-name plain_number_impl \
    --emit=metadata -o "$out/plain_number_impl.rmeta" \
    --extern distkit="$distkit" -L dependency="$(dirname "$distkit")" \
    -L dependency="$(dirname "$sys")" "$@" "$src" 2>&1
}
if ! log="$(compile --cfg control)"; then
  echo "FAIL: the control (no impl) does not compile:"; echo "$log"; exit 1
fi
if log="$(compile)"; then
  echo "FAIL: a user's impl of distkit::PlainNumber compiles (the trait is not sealed)"; exit 1
fi
for type in Flag Padded; do
  if ! grep -q "E0277.*\`$type: .*Sealed\` is not satisfied" <<<"$log"; then
    echo "FAIL: no 'Sealed not satisfied' error for $type:"; echo "$log"; exit 1
  fi
done
echo "PASS: impls of the sealed distkit::PlainNumber are rejected"
