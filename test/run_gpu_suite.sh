#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole GPU verification in one call, for a machine with a GPU: every
# test/gpu_checks/*.sh through test/run_gpu_check.sh, as `ctest -L gpu` runs
# them, for a build folder that holds the programs but no CTest files (a
# build copied to the GPU machine). From the repository root:
#   test/run_gpu_suite.sh [build-dir]
# Logs go to $OUT/<check> (OUT defaults to /tmp/cudapmr-gpu), packed into
# $OUT/gpu-logs.tar.gz, with the summary in $OUT/summary.txt; the last lines
# printed are the summary. Exit status 0 when every verdict passed.
set -uo pipefail
build=${1:-build}
results=${OUT:-/tmp/cudapmr-gpu}
mkdir -p "$results"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
checks=(suite demo)
for file in test/gpu_checks/*.sh; do
  name=$(basename "$file" .sh)
  [[ $name == suite || $name == demo ]] || checks+=("$name")
done
failed=0
for check in "${checks[@]}"; do
  echo "==== $check"
  OUT=$results test/run_gpu_check.sh "$check" "$build" | tee "$results/$check.verdicts"
  [[ ${PIPESTATUS[0]} == 0 ]] || failed=1
done
echo
echo "==== summary ===="
for check in "${checks[@]}"; do grep -E '^(PASS|FAIL|SKIP)  ' "$results/$check.verdicts"; done | tee "$results/summary.txt"
tar -czf "$results/gpu-logs.tar.gz" -C "$results" "${checks[@]}" 2>/dev/null
exit $failed
