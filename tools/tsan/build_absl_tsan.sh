#!/usr/bin/env bash
# Builds Abseil's shared libraries with ThreadSanitizer, from Debian's own
# source package of the installed libabsl, into a cache directory; prints
# that directory's lib/. All of them, not only synchronization: a library
# that inlines SpinLock without TSan's annotations (random's pool, for one)
# next to an annotated one trips TSan's own checks.
#
# Why: Debian's libabsl is not built with -fsanitize=thread, so TSan cannot
# see absl::Mutex / CondVar / Notification and reports every access they
# guard as a race. Loading these builds instead (LD_LIBRARY_PATH; same
# version, same patches, same options, so the same ABI) makes the locks
# visible, to distkit's code and to gRPC's, which locks through absl::Mutex.
#
# Idempotent: a finished build is reused (a few minutes on 2 cores the
# first time). Needs Debian's source index, fetched here into the cache
# (no change to the machine's apt sources).
set -euo pipefail

version="$(dpkg-query -W -f='${Version}' libabsl-dev)"
cache="${DISTKIT_TSAN_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/distkit/absl-tsan-$version}"
lib="$cache/lib"
if [ -f "$lib/.complete" ]; then
  echo "$lib"
  exit 0
fi
mkdir -p "$cache/apt/lists/partial" "$cache/apt/sources"
cat > "$cache/apt/sources/debian-src.sources" <<SOURCES
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
apt_opts=(-o "Dir::Etc::SourceParts=$cache/apt/sources"
          -o "Dir::Etc::SourceList=/dev/null"
          -o "Dir::State::Lists=$cache/apt/lists" -qq)
rm -rf "$cache/src" "$cache/build" "$cache/download"
mkdir -p "$cache/download"
# A machine that cannot reach Debian's archive cannot run the TSan checks:
# say so (exit 3, nothing printed on stdout) rather than fail the build.
if ! apt-get "${apt_opts[@]}" update >&2 ||
   ! (cd "$cache/download" &&
      apt-get "${apt_opts[@]}" source --download-only "abseil=$version" >&2); then
  echo "build_absl_tsan: cannot fetch Debian's abseil $version source" >&2
  exit 3
fi
dpkg-source -x "$cache/download"/abseil_*.dsc "$cache/src" >/dev/null
# Debian's own configuration (debian/rules), plus TSan; -O1 -g1 as distkit's
# TSan build (.bazelrc) for half the compile time of -O2 -g (the optimization
# level and debug info do not change the ABI).
cmake -S "$cache/src" -B "$cache/build" -G Ninja -DCMAKE_CXX_STANDARD=17 \
  -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" >/dev/null
ninja -C "$cache/build" -j"$(nproc)" >/dev/null
rm -rf "$lib"
mkdir -p "$lib"
find "$cache/build/absl" -name 'libabsl_*.so.*' -exec cp -a {} "$lib/" \;
touch "$lib/.complete"
echo "$lib"
