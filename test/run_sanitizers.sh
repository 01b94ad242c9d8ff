#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# compute-sanitizer's four tools over the test suite, the demo and a short
# stress run, on a machine with a GPU; one summary line per tool:
#   test/run_sanitizers.sh [build-dir]
# Logs go to $OUT/sanitizers (or /tmp/cudapmr-gpu/sanitizers). SANITIZER_TOOLS
# picks tools ("memcheck racecheck initcheck synccheck" by default) and
# SANITIZER_SHARDS how many parts the suite is split into (gtest sharding).
# Every tool, shard and program runs at once: under the tools the suite is
# CPU-bound, and one tool after another over the whole suite takes many
# minutes. Exit status 0 when every tool reports zero errors on every program.
#
# The suite provokes allocation failures on purpose, so CUDA API error
# reports are off for it; they stay on for the demo and the stress run, which
# must make no failing CUDA call. CUDAPMR_UNDER_COMPUTE_SANITIZER tells the
# exhaustion test to fill a capped pool instead of the whole GPU, which the
# tools' per-byte shadow state would make slow (and which the shards share).
set -uo pipefail
build=${1:-build}
logs=${OUT:-/tmp/cudapmr-gpu}/sanitizers
mkdir -p "$logs"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
tools=${SANITIZER_TOOLS:-memcheck racecheck initcheck synccheck}
shards=${SANITIZER_SHARDS:-6}
limit=${SANITIZER_TIMEOUT:-480}  # seconds for any one program under a tool
tests=$build/test/cudapmr_tests
demo=$build/apps/memory_resources/memory_resources
stress=$build/apps/stress/cudapmr_stress
export CUDAPMR_UNDER_COMPUTE_SANITIZER=1

# The options each tool runs with; memcheck also checks for leaks.
tool_options() {
  case $1 in
    memcheck) echo "--tool memcheck --leak-check full" ;;
    racecheck) echo "--tool racecheck --racecheck-report all" ;;
    *) echo "--tool $1" ;;
  esac
}

# The stress run's arguments under a tool. Under two of them one thread drives
# all the streams: racecheck (CUDA 13.0) loses track of kernels launched from
# several host threads at once and then stalls; initcheck reports reads of
# memory written in stream order when several host threads allocate from
# stream-ordered pools, in a correct program without cudapmr too
# (test/gpu_checks/initcheck_pool_threads.cu).
stress_arguments() {
  case $1 in
    racecheck | initcheck) echo "--operations 4000 --threads 1 --streams 4" ;;
    *) echo "--operations 4000 --threads 4 --streams 2" ;;
  esac
}

# Errors in a log: the sum of its "ERROR SUMMARY: N errors" lines; "missing"
# when the log has none (the program did not run to the end under the tool).
count_errors() {
  local summaries
  summaries=$(grep -oE 'ERROR SUMMARY: [0-9]+ error' "$1" | grep -oE '[0-9]+')
  # racecheck may sum up its hazards in a line of its own instead.
  [[ -z $summaries ]] && summaries=$(grep -oE 'RACECHECK SUMMARY: .*\(([0-9]+) error' "$1" | grep -oE '[0-9]+ error' | grep -oE '[0-9]+')
  if [[ -z $summaries ]]; then echo missing; else echo "$summaries" | awk '{ sum += $1 } END { print sum }'; fi
}

# run_under TOOL NAME API_REPORTS COMMAND...: in the background, with the
# variables in run_environment set; the log is $logs/TOOL-NAME.log and the
# exit status goes to $logs/TOOL-NAME.rc. The command is kept in commands
# for a rerun.
run_environment=()
declare -A commands
run_under() {
  local tool=$1 name=$2 api=$3
  shift 3
  # shellcheck disable=SC2046
  commands[$tool-$name]=$(printf '%q ' env "${run_environment[@]}" timeout "$limit" "$sanitizer" $(tool_options "$tool") \
    --report-api-errors "$api" --error-exitcode 99 "$@")
  (eval "${commands[$tool-$name]}" >"$logs/$tool-$name.log" 2>&1; echo $? >"$logs/$tool-$name.rc") &
}

# A log whose every error is the tool's own "Internal error encountered" (seen
# from memcheck over the stress run while all the tools ran at once, on an
# H100, 2026-12-07; the same run alone: 0 errors, three times out of three)
# is not a finding about the program: the program runs again alone, once, and
# that run's log counts. The first log is kept beside it, and the summary says so.
rerun_after_internal_errors() {
  local log name internal found
  for log in "$logs"/*.log; do
    name=$(basename "$log" .log)
    [[ -n ${commands[$name]:-} ]] || continue
    internal=$(grep -c 'Internal error encountered' "$log")
    found=$(count_errors "$log")
    if ((internal == 0)) || [[ $found != "$internal" ]]; then continue; fi
    mv "$log" "$logs/$name.internal-errors.txt"
    eval "${commands[$name]}" >"$log" 2>&1
    echo $? >"$logs/$name.rc"
    echo "$internal" >"$logs/$name.reran"
  done
}

status=0
for program in "$tests" "$demo" "$stress"; do
  if [[ ! -x $program ]]; then
    echo "FAIL  $program is not built"
    status=1
  fi
done
((status)) && exit $status

# Uses of freed memory, provoked on purpose (MemcheckSeesCachedBlocks, disabled
# in the suite); memcheck must report each. The tool sees only frees that
# reach CUDA (it refuses NVTX heaps over the pools' memory, which the caches
# hold), so these runs set CUDAPMR_NO_CACHING=1: the caches keep nothing.
provocations=(AKernelWritingAPoolBlockFreedThroughTheCache AKernelWritingAPinnedBlockFreedThroughThePmrPath)
if [[ " $tools " == *" memcheck "* ]]; then
  for name in "${provocations[@]}"; do
    run_environment=("CUDAPMR_NO_CACHING=1")
    run_under memcheck "provoked-$name" no "$tests" --gtest_also_run_disabled_tests \
      --gtest_filter="MemcheckSeesCachedBlocks.DISABLED_$name"
  done
  run_environment=()
fi

for tool in $tools; do
  for ((shard = 0; shard < shards; ++shard)); do
    run_environment=("GTEST_TOTAL_SHARDS=$shards" "GTEST_SHARD_INDEX=$shard")
    run_under "$tool" "tests-$shard" no "$tests" --gtest_brief=1
  done
  run_environment=()
  run_under "$tool" demo explicit "$demo"
  # shellcheck disable=SC2046
  run_under "$tool" stress explicit "$stress" $(stress_arguments "$tool")
done
wait
rerun_after_internal_errors

for tool in $tools; do
  line="$tool:"
  tool_failed=0
  for program in tests demo stress; do
    errors=0
    worst_rc=0
    reran=""
    for log in "$logs/$tool-$program"*.log; do
      found=$(count_errors "$log")
      rc=$(cat "${log%.log}.rc" 2>/dev/null || echo missing)
      [[ -f ${log%.log}.reran ]] && reran+="; $(basename "$log" .log) run again alone after $(cat "${log%.log}.reran") internal errors of the tool"
      if [[ $found == missing ]]; then errors=missing; elif [[ $errors != missing ]]; then errors=$((errors + found)); fi
      [[ $rc != 0 ]] && worst_rc=$rc
    done
    [[ $worst_rc != 0 || $errors != 0 ]] && tool_failed=1
    [[ $program == tests ]] && program="tests ($shards shards)"
    line+=" $program $errors errors (rc $worst_rc$reran);"
  done
  if ((tool_failed)); then echo "FAIL  $line"; status=1; else echo "PASS  $line"; fi
done

if [[ " $tools " == *" memcheck "* ]]; then
  line="memcheck-provoked:"
  provoked_failed=0
  for name in "${provocations[@]}"; do
    log="$logs/memcheck-provoked-$name.log"
    rc=$(cat "${log%.log}.rc" 2>/dev/null || echo missing)
    reports=$(grep -c 'Invalid __global__ write' "$log" 2>/dev/null)
    ran=$(grep -c "OK \] MemcheckSeesCachedBlocks.DISABLED_$name" "$log" 2>/dev/null)
    # The test itself passes (the block was cached); memcheck reports the write and exits 99.
    [[ $rc != 99 || ${reports:-0} == 0 || ${ran:-0} == 0 ]] && provoked_failed=1
    line+=" $name ${reports:-0} reports (rc $rc);"
  done
  if ((provoked_failed)); then echo "FAIL  $line"; status=1; else echo "PASS  $line"; fi
fi
exit $status
