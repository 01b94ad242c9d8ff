# SPDX-License-Identifier: Apache-2.0
# Sourced by test/run_gpu_check.sh ($build, $out, verdict): memory snapshots
# that PyTorch's viewer opens. The demo (--report) and a replay of a 16-thread
# log write PyTorch's snapshot pickle, cudapmr's JSON and a Chrome trace;
# `python3 -m torch.cuda._memory_viz` renders each pickle as trace_plot and
# segment_plot pages and prints its stats; each snapshot's peak must equal
# the statistics the program printed (memviz_check.py).
memviz_demo=$build/apps/memory_resources/memory_resources
memviz_replay=$build/apps/replay/replay
memviz_python=${MEMVIZ_PYTHON:-python3}

memviz_render() {  # memviz_render NAME PICKLE: torch's viewer over one pickle
  local name=$1 snapshot=$2 plot rc detail
  for plot in trace_plot segment_plot; do
    "$memviz_python" -m torch.cuda._memory_viz $plot "$snapshot" -d 0 -o "$out/$name-$plot.html" \
      >"$out/$name-$plot.log" 2>&1
    rc=$?
    detail="$(wc -c <"$out/$name-$plot.html" 2>/dev/null || echo 0) bytes of HTML"
    [[ $rc == 0 && ! -s $out/$name-$plot.html ]] && rc=3
    verdict "torch.cuda._memory_viz $plot of the $name snapshot" 0 $rc "$detail; $(tail -1 "$out/$name-$plot.log")"
  done
  "$memviz_python" -m torch.cuda._memory_viz stats "$snapshot" >"$out/$name-stats.log" 2>&1
  verdict "torch.cuda._memory_viz stats of the $name snapshot" 0 $? "$(grep -E '^(segments|total_allocated)' \
    "$out/$name-stats.log" | tr '\n' ' ')"
}

if ! "$memviz_python" -c 'import torch.cuda._memory_viz' >"$out/torch.log" 2>&1; then
  verdict "import torch.cuda._memory_viz ($memviz_python; MEMVIZ_PYTHON picks another)" 0 1 "$(tail -1 "$out/torch.log")"
fi

"$memviz_demo" --report --snapshot "$out/demo.pickle" --snapshot "$out/demo.json" --trace "$out/demo-trace.json" \
  >"$out/demo.log" 2>&1
rc=$?
verdict "demo --report --snapshot --trace" 0 $rc "$(wc -c "$out"/demo.pickle "$out"/demo.json "$out"/demo-trace.json \
  2>&1 | tr '\n' ' ')"
"$memviz_python" test/gpu_checks/memviz_check.py demo "$out/demo.log" "$out/demo.pickle" "$out/demo.json" \
  >"$out/demo-peaks.log" 2>&1
verdict "demo snapshot peaks equal its statistics" 0 $? "$(tr '\n' ' ' <"$out/demo-peaks.log")"
memviz_render demo "$out/demo.pickle"

"$memviz_replay" --record "$out/workload.csv" --resource device --threads 16 --allocations 2000 \
  >"$out/record.log" 2>&1
verdict "replay --record on device (16 threads)" 0 $? "$(grep -E '^peak' "$out/record.log")"
"$memviz_replay" "$out/workload.csv" --resource device --snapshot "$out/replay.pickle" --snapshot "$out/replay.json" \
  --trace "$out/replay-trace.json" >"$out/replay.log" 2>&1
verdict "replay --snapshot --trace on device" 0 $? "$(grep -E '^(peak|snapshot):' "$out/replay.log" | tr '\n' ' ')"
"$memviz_python" test/gpu_checks/memviz_check.py replay "$out/replay.log" "$out/replay.pickle" "$out/replay.json" \
  >"$out/replay-peaks.log" 2>&1
verdict "replay snapshot peaks equal its statistics" 0 $? "$(tr '\n' ' ' <"$out/replay-peaks.log")"
memviz_render replay "$out/replay.pickle"
echo "memviz: the pages and snapshots are in $out (open a .pickle at https://pytorch.org/memory_viz, a trace at https://ui.perfetto.dev)"

# apps/memviz's pages of the same JSON snapshots (Debian's python3 has plotly),
# with a screenshot of each where Chromium is installed.
memviz_page_python=${MEMVIZ_PAGE_PYTHON:-/usr/bin/python3}
memviz_pages=(demo replay)
if ! "$memviz_page_python" -c 'import plotly' >/dev/null 2>&1; then
  # A machine without plotly (a GPU image with no network) cannot draw them: said, not passed.
  note "SKIP  apps/memviz pages: $memviz_page_python has no plotly (MEMVIZ_PAGE_PYTHON names a Python that has it)"
  memviz_pages=()
fi
for memviz_name in "${memviz_pages[@]}"; do
  "$memviz_page_python" apps/memviz/memviz.py "$out/$memviz_name.json" -o "$out/$memviz_name-memviz.html" \
    >"$out/$memviz_name-memviz.log" 2>&1
  verdict "apps/memviz page of the $memviz_name snapshot" 0 $? "$(tail -1 "$out/$memviz_name-memviz.log")"
  if command -v chromium >/dev/null; then
    timeout 300 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --virtual-time-budget=10000 \
      --window-size=1400,900 --screenshot="$out/$memviz_name-memviz.png" "file://$out/$memviz_name-memviz.html" \
      >/dev/null 2>&1
  fi
done
