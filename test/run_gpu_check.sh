#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs one of test/gpu_checks/*.sh on a machine with a GPU; CTest runs each
# as a test labelled `gpu` (`ctest -L gpu`). From the repository root:
#   test/run_gpu_check.sh CHECK [build-dir]
# One PASS or FAIL line per verdict; logs go to $OUT/CHECK (or
# /tmp/cudapmr-gpu/CHECK). Exit status 0 when every verdict passed, 1 when one
# failed, 77 (CTest's skip) where there is no GPU.
set -uo pipefail
check=${1:?usage: test/run_gpu_check.sh CHECK [build-dir]}
build=${2:-build}
[[ -f test/gpu_checks/$check.sh ]] || { echo "run_gpu_check: no test/gpu_checks/$check.sh" >&2; exit 2; }
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "SKIP  $check: no GPU on this machine"
  exit 77
fi
out=${OUT:-/tmp/cudapmr-gpu}/$check
rm -rf "$out" && mkdir -p "$out"
failed=0
note() { echo "$1"; }
verdict() {  # verdict NAME EXPECTED_RC ACTUAL_RC DETAIL
  if [[ $2 == "$3" ]]; then note "PASS  $1 (rc $3) $4"; else note "FAIL  $1 (rc $3, expected $2) $4"; failed=1; fi
}
# shellcheck source=/dev/null
source "test/gpu_checks/$check.sh"
exit $failed
