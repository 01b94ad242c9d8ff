# SPDX-License-Identifier: Apache-2.0
# Sourced by test/run_gpu_check.sh ($build, $out, verdict): a short run of each
# kind of transfer benchmark (pageable staging, pinned copies, the
# kernel, managed prefetch), so that a broken one shows before the full
# benchmark run. Rates are logged, never judged.
transfers_bench=$build/apps/bench/cudapmr_bench
if [[ -x $transfers_bench ]]; then
  "$transfers_bench" --benchmark_min_time=0.05 --benchmark_color=false \
    --benchmark_filter='^(copy/(h2d|d2h)/(pinned|pageable|managed)|copy/d2d/device|kernel|managed)/(4KiB|64MiB)/' \
    >"$out/transfers-smoke.log" 2>&1
  rc=$?
  transfers_errors=$(grep -c 'ERROR OCCURRED' "$out/transfers-smoke.log")
  [[ $rc == 0 && $transfers_errors != 0 ]] && rc=1
  verdict "transfer benchmarks smoke" 0 $rc \
    "$(grep -cE '^(copy|kernel|managed)/' "$out/transfers-smoke.log") runs, $transfers_errors errors"
else
  verdict "transfer benchmarks smoke" 0 1 "$transfers_bench was not built"
fi
