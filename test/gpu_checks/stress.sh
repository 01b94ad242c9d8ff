# SPDX-License-Identifier: Apache-2.0
# Sourced by test/run_gpu_check.sh ($build, $out, verdict): the full stress run:
# 10^6 random operations by 16 threads over 4 streams across every
# resource and adaptor stack; it prints its totals and operations per second.
# Then a short run over two named targets.
stress_binary=$build/apps/stress/cudapmr_stress
if [[ -x $stress_binary ]]; then
  timeout 300 "$stress_binary" --operations 1000000 --threads 16 --streams 4 >"$out/stress.log" 2>&1
  stress_rc=$?
  verdict "stress (10^6 operations, 16 threads, 4 streams)" 0 $stress_rc "$(tail -1 "$out/stress.log")"
  cat "$out/stress.log"
  # Two targets only: their device mismatch counters are numbered among the picked.
  timeout 120 "$stress_binary" --operations 20000 --threads 4 --streams 2 --targets managed,device+caching \
    >"$out/stress-targets.log" 2>&1
  stress_rc=$?
  verdict "stress over two named targets" 0 $stress_rc "$(tail -1 "$out/stress-targets.log")"
else
  verdict "stress" 0 1 "$stress_binary was not built"
fi
