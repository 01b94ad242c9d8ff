#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole GPU verification in one call, for a machine with a GPU: the test
# suite, the demo (expected output, sizes, bad arguments), memcheck over both,
# and every area's checks in test/gpu_checks/. Run from the repository root
# on binaries built with CMake:
#   test/run_gpu_suite.sh [build-dir]
# Logs are written to a scratch folder, then packed into $OUT/gpu-logs.tar.gz
# with the summary beside it in $OUT/summary.txt (OUT defaults to
# /tmp/cudapmr-gpu); the last lines printed are the summary.
set -uo pipefail
build=${1:-build}
results=${OUT:-/tmp/cudapmr-gpu}
mkdir -p "$results"
out=$(mktemp -d)
tests=$build/test/cudapmr_tests
demo=$build/apps/memory_resources/memory_resources
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
summary=()
failed=0

note() { summary+=("$1"); echo "$1"; }
verdict() {  # verdict NAME EXPECTED_RC ACTUAL_RC DETAIL
  if [[ $2 == "$3" ]]; then note "PASS  $1 (rc $3) $4"; else note "FAIL  $1 (rc $3, expected $2) $4"; failed=1; fi
}

nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader | tee "$out/gpu.txt"

# 1. The GoogleTest suite.
"$tests" --gtest_brief=1 >"$out/tests.log" 2>&1
rc=$?
verdict "tests" 0 $rc "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/tests.log" | tr '\n' ' ')"

# 2. The demo: the sample's output, line for line, at three sizes.
for elements in default 1048576 100000007; do
  args=()
  [[ $elements != default ]] && args=(--elements "$elements")
  "$demo" "${args[@]}" >"$out/demo-$elements.log" 2>&1
  rc=$?
  if sed -E '1s/^Device: .+$/Device: */; 2s/^Compute Capability: [0-9]+\.[0-9]+$/Compute Capability: */' \
       "$out/demo-$elements.log" | diff -q - apps/memory_resources/expected_output.txt >/dev/null; then
    match="output as expected"
  else
    match="output differs"
  fi
  [[ $match == "output differs" ]] && failed=1
  verdict "demo --elements $elements" 0 $rc "$match"
done
cat "$out/demo-default.log"

# 3. The demo refuses what it cannot use, with exit code 2 and one line.
for bad in "--elements 0" "--elements -5" "--elements abc" "--elements 99999999999999999999" \
           "--elements 100000000000" "--device -1" "--device 9" "--bogus"; do
  # shellcheck disable=SC2086
  "$demo" $bad >/dev/null 2>"$out/refusal.txt"
  rc=$?
  message=$(head -1 "$out/refusal.txt")
  verdict "demo $bad" 2 $rc "-> $message"
done

# 4. compute-sanitizer (memcheck with leak checking, racecheck, initcheck,
# synccheck) over the suite and the demo: test/gpu_checks/sanitizers.sh, below.

# 5. Checks of other areas (extra programs, multi-process runs): each
# test/gpu_checks/*.sh is sourced with $build and $out set and calls verdict.
for check in test/gpu_checks/*.sh; do
  [[ -e $check ]] || continue
  # shellcheck source=/dev/null
  source "$check"
done

echo
echo "==== summary ===="
printf '%s\n' "${summary[@]}" | tee "$results/summary.txt"
tar -czf "$results/gpu-logs.tar.gz" -C "$out" .
exit $failed
