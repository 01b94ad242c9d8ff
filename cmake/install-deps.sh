#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages cudapmr builds with, where they are missing.
# The CUDA toolkit itself is expected at /usr/local/cuda.
set -euo pipefail
# libdlpack-dev: DLPack's header; libhwloc-dev: the host's NUMA topology;
# libcli11-dev: the programs' command lines;
# python3-venv and python3-dev: the Python package's virtual environment and the headers its module builds with;
# clang-14 and libclang-rt-14-dev (libFuzzer, clang's sanitizers): the fuzzer CI runs (test/fuzz);
# python3-plotly and chromium: apps/memviz's page and its browser test (test/memviz).
packages=(cmake g++ make libfmt-dev libgtest-dev libbenchmark-dev libdlpack-dev libhwloc-dev libcli11-dev
          python3-venv python3-dev clang-14 libclang-rt-14-dev python3-plotly chromium)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
if [[ ! -x /usr/local/cuda/bin/nvcc ]] && ! command -v nvcc >/dev/null; then
  echo "install-deps: the CUDA toolkit (nvcc) was not found at /usr/local/cuda" >&2
  exit 1
fi
