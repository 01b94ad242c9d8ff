#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Packs what a GPU machine without the build's packages needs to run the
# checks, from the repository root of a finished build:
#   test/pack_gpu_bundle.sh [build-dir] [bundle-dir]
# into bundle-dir (default gpu-bundle):
#   build-run.tar.xz   every program and shared library of the build, stripped,
#                      in the build's layout (unpack it and pass build-run to
#                      test/run_gpu_suite.sh, apps/bench/run_tables.sh)
#   prefix/usr/...     Debian's fmt, dlpack and hwloc headers, CMake files and
#                      libraries, and libudev: LD_LIBRARY_PATH for the programs
#                      (libhwloc.so.15), CMAKE_PREFIX_PATH and HWLOC_ROOT for
#                      building the Python package there (test/python/gpu_check.sh)
# Prints the bundle's size; the programs link cudart statically and fmt
# header-only, so nothing else of the toolkit or Debian travels.
set -euo pipefail
build=${1:-build}
bundle=${2:-gpu-bundle}
[[ -x $build/test/cudapmr_tests ]] || { echo "pack_gpu_bundle: $build has no test/cudapmr_tests: build first" >&2; exit 2; }
rm -rf "$bundle" && mkdir -p "$bundle/prefix"
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT

# Programs and shared libraries (RMM's and Google Benchmark's travel beside
# the programs that load them through $ORIGIN), not object files or CMake's own.
(cd "$build" && find . -path ./CMakeFiles -prune -o -path '*/CMakeFiles' -prune -o \
  \( -type f \( -perm -u+x -o -name '*.so*' \) -o -type l -name '*.so*' \) -print) |
  while read -r file; do
    if [[ ! -L $build/$file ]] && ! head -c 4 "$build/$file" | grep -q 'ELF'; then continue; fi
    mkdir -p "$staging/build-run/$(dirname "$file")"
    cp -a "$build/$file" "$staging/build-run/$file"
    [[ -L $staging/build-run/$file ]] || strip --strip-unneeded "$staging/build-run/$file" 2>/dev/null || true
  done
tar -C "$staging" -cf - build-run | xz -6 -T0 >"$bundle/build-run.tar.xz"

# What building the Python package and loading libhwloc need where apt is not reachable.
for package in libfmt-dev libdlpack-dev libhwloc-dev; do
  dpkg -L "$package" | grep -v -e /share/doc -e /share/man -e '\.a$' | while read -r file; do
    [[ -f $file ]] || continue
    mkdir -p "$bundle/prefix$(dirname "$file")"
    cp -a "$file" "$bundle/prefix$file"
  done
done
library_dir=$bundle/prefix/usr/lib/x86_64-linux-gnu
mkdir -p "$library_dir"
cp -a /usr/lib/x86_64-linux-gnu/libhwloc.so.15* /usr/lib/x86_64-linux-gnu/libfmt.so.* "$library_dir/"
cp -aL /lib/x86_64-linux-gnu/libudev.so.1 "$library_dir/"
du -sh "$bundle" "$bundle/build-run.tar.xz"
