#!/bin/bash
# find_tool.sh TOOL ARGS...: runs rustc, cargo or go from where this machine
# has it. Bazel actions and tests see a bare PATH (/usr/local/bin:/usr/bin:/bin)
# and no HOME, so rustup's proxies in ~/.cargo/bin cannot be used: this finds
# the real toolchain binary instead. DISTKIT_RUST_TOOLCHAIN (a toolchain folder
# holding bin/rustc) overrides the search.
set -euo pipefail
tool="$1"
shift
candidates=()
if [[ -n "${DISTKIT_RUST_TOOLCHAIN:-}" ]]; then
  candidates+=("${DISTKIT_RUST_TOOLCHAIN}/bin/${tool}")
fi
for home in "${RUSTUP_HOME:-}" "${HOME:-/nonexistent}/.rustup" /root/.rustup /usr/local/rustup; do
  [[ -n "$home" ]] || continue
  for dir in "$home"/toolchains/stable-* "$home"/toolchains/*; do
    candidates+=("$dir/bin/$tool")
  done
done
candidates+=("/usr/local/go/bin/$tool" "/usr/lib/go/bin/$tool" "/usr/local/bin/$tool" "/usr/bin/$tool")
for c in "${candidates[@]}"; do
  if [[ -x "$c" && ! -L "$c" ]] || [[ -x "$c" && "$(basename "$(readlink -f "$c")")" != rustup ]]; then
    # cargo runs rustc and rustdoc from the same toolchain.
    export PATH="$(dirname "$c"):$PATH"
    exec "$c" "$@"
  fi
done
echo "find_tool.sh: no '$tool' found (looked in ${candidates[*]})." >&2
echo "Install it (Rust: rustup; Go: apt-get install golang-go) or set DISTKIT_RUST_TOOLCHAIN." >&2
exit 127
