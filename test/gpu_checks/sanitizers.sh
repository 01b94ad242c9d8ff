# SPDX-License-Identifier: Apache-2.0
# Sourced by test/run_gpu_check.sh ($build, $out, verdict): compute-sanitizer's
# memcheck, racecheck, initcheck and synccheck over the suite, the demo and a
# short stress run (test/run_sanitizers.sh), one verdict per tool. Set
# CUDAPMR_SKIP_SANITIZERS=1 to leave them to a call of their own
# (test/run_sanitizers.sh build), when one call must stay short.
if [[ -n ${CUDAPMR_SKIP_SANITIZERS:-} ]]; then
  note "SKIP  compute-sanitizer tools (CUDAPMR_SKIP_SANITIZERS is set)"
else
  OUT=$out test/run_sanitizers.sh "$build" >"$out/sanitizers.log" 2>&1
  while read -r sanitizers_result sanitizers_tool sanitizers_detail; do
    [[ $sanitizers_result == PASS ]] && sanitizers_rc=0 || sanitizers_rc=1
    verdict "compute-sanitizer ${sanitizers_tool%:}" 0 $sanitizers_rc "$sanitizers_detail"
  done < <(grep -E '^(PASS|FAIL)  ' "$out/sanitizers.log")
  grep -qE '^(PASS|FAIL)  ' "$out/sanitizers.log" || verdict "compute-sanitizer" 0 1 "no summary: see $out/sanitizers.log"
fi
