# SPDX-License-Identifier: Apache-2.0
# Sourced by test/run_gpu_check.sh ($build, $out, verdict): the adaptors' programs
# on the GPU. `replay --record` runs a 16-thread workload on device memory
# through a logging_adaptor; `replay` plays that log back against device,
# pinned, managed and host memory (checking every free with --track) and must
# reproduce the recorded peak to the byte; a cap one byte below the peak must
# refuse allocations (exit 1). The demo with --report prints the sample's
# output unchanged, then a usage report in which nothing is left allocated.
adaptors_replay=$build/apps/replay/replay
adaptors_demo=$build/apps/memory_resources/memory_resources
adaptors_log=$out/adaptors-workload.csv
adaptors_peak_of() { sed -nE 's/^peak: ([0-9]+) bytes.*/\1/p' "$1"; }

if [[ -x $adaptors_replay ]]; then
  "$adaptors_replay" --record "$adaptors_log" --resource device --threads 16 --allocations 2000 \
    >"$out/adaptors-record.log" 2>&1
  rc=$?
  adaptors_peak=$(adaptors_peak_of "$out/adaptors-record.log")
  [[ $rc == 0 && -z $adaptors_peak ]] && rc=3
  verdict "replay --record on device" 0 $rc "$(grep -E '^(recorded|peak)' "$out/adaptors-record.log" | tr '\n' ' ')"

  for adaptors_kind in device pinned managed host; do
    "$adaptors_replay" "$adaptors_log" --resource $adaptors_kind --track >"$out/adaptors-replay-$adaptors_kind.log" 2>&1
    rc=$?
    adaptors_replayed=$(adaptors_peak_of "$out/adaptors-replay-$adaptors_kind.log")
    # rc 3: replayed, but not to the recorded peak (or with bad frees).
    if [[ $rc == 0 ]] && { [[ $adaptors_replayed != "$adaptors_peak" ]] ||
                           ! grep -q '^bad frees: 0$' "$out/adaptors-replay-$adaptors_kind.log"; }; then
      rc=3
    fi
    verdict "replay on $adaptors_kind" 0 $rc "peak $adaptors_replayed bytes (recorded $adaptors_peak); $(
      grep -E '^(log|pool|time|failures|bad frees):' "$out/adaptors-replay-$adaptors_kind.log" | tr '\n' ' ')"
  done

  if [[ -n $adaptors_peak ]]; then
    "$adaptors_replay" "$adaptors_log" --resource device --limit $((adaptors_peak - 1)) \
      >"$out/adaptors-replay-capped.log" 2>&1
    rc=$?
    verdict "replay capped one byte below the peak" 1 $rc "$(grep -E '^(peak|failures):' "$out/adaptors-replay-capped.log" | tr '\n' ' ')"
  fi
else
  verdict "replay" 0 1 "$adaptors_replay was not built"
fi

"$adaptors_demo" --report >"$out/adaptors-demo-report.log" 2>&1
rc=$?
adaptors_lines=$(wc -l <apps/memory_resources/expected_output.txt)
if head -n "$adaptors_lines" "$out/adaptors-demo-report.log" |
   sed -E '1s/^Device: .+$/Device: */; 2s/^Compute Capability: [0-9]+\.[0-9]+$/Compute Capability: */' |
   diff -q - apps/memory_resources/expected_output.txt >/dev/null; then
  adaptors_match="sample output unchanged"
else
  adaptors_match="sample output differs"
  [[ $rc == 0 ]] && rc=3
fi
adaptors_entries=$(grep -c '^    usage: ' "$out/adaptors-demo-report.log")
adaptors_clean=$(grep -c '^    usage: current 0 B in 0 allocations,' "$out/adaptors-demo-report.log")
[[ $rc == 0 && ($adaptors_entries != 4 || $adaptors_clean != 4) ]] && rc=3
verdict "demo --report" 0 $rc "$adaptors_match; $adaptors_entries resources reported, $adaptors_clean with nothing left allocated"
sed -n "$((adaptors_lines + 1)),\$p" "$out/adaptors-demo-report.log"
