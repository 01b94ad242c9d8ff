#!/usr/bin/env bash
# compute-sanitizer's four tools over the test suite, the demo and a short
# stress run, on a machine with a GPU; one summary line per tool:
#   test/run_sanitizers.sh [build-dir]
# Logs go to $OUT/sanitizers (or /tmp/cudapmr-gpu/sanitizers). SANITIZER_TOOLS
# picks tools ("memcheck racecheck initcheck synccheck" by default). Exit
# status 0 when every tool reports zero errors on every program.
#
# The suite provokes allocation failures on purpose, so CUDA API error
# reports are off for it; they stay on for the demo and the stress run, which
# must make no failing CUDA call. CUDAPMR_UNDER_COMPUTE_SANITIZER tells the
# exhaustion test to fill a capped pool instead of the whole GPU, which the
# tools' per-byte shadow state would make slow.
set -uo pipefail
build=${1:-build}
logs=${OUT:-/tmp/cudapmr-gpu}/sanitizers
mkdir -p "$logs"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
tools=${SANITIZER_TOOLS:-memcheck racecheck initcheck synccheck}
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

# Errors in a log: the sum of its "ERROR SUMMARY: N errors" lines; "missing"
# when the log has none (the program did not run to the end under the tool).
count_errors() {
  local summaries
  summaries=$(grep -oE 'ERROR SUMMARY: [0-9]+ error' "$1" | grep -oE '[0-9]+')
  # racecheck may sum up its hazards in a line of its own instead.
  [[ -z $summaries ]] && summaries=$(grep -oE 'RACECHECK SUMMARY: .*\(([0-9]+) error' "$1" | grep -oE '[0-9]+ error' | grep -oE '[0-9]+')
  if [[ -z $summaries ]]; then echo missing; else echo "$summaries" | awk '{ sum += $1 } END { print sum }'; fi
}

status=0
for tool in $tools; do
  line="$tool:"
  tool_failed=0
  for program in tests demo stress; do
    case $program in
      tests) command=("$tests" --gtest_brief=1); api=(--report-api-errors no) ;;
      demo) command=("$demo"); api=() ;;
      stress) command=("$stress" --operations 4000 --threads 4 --streams 2); api=() ;;
    esac
    if [[ ! -x ${command[0]} ]]; then
      line+=" $program not built;"
      tool_failed=1
      continue
    fi
    log=$logs/$tool-$program.log
    # shellcheck disable=SC2046
    "$sanitizer" $(tool_options "$tool") "${api[@]}" --error-exitcode 99 "${command[@]}" >"$log" 2>&1
    rc=$?
    errors=$(count_errors "$log")
    [[ $rc != 0 || $errors != 0 ]] && tool_failed=1
    line+=" $program $errors errors (rc $rc);"
  done
  if ((tool_failed)); then echo "FAIL  $line"; status=1; else echo "PASS  $line"; fi
done
exit $status
