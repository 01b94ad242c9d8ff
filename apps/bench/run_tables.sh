#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The figures of README's performance table in one run, on a machine with a
# GPU, every peer in the same run: the allocation bench over the default
# stack, the two front ends and the peers (cudaMallocAsync, cub with tuned
# bins, RMM's pool, arena, binning and cuda_async where the build has RMM),
# 16 threads against one; the memory bench over the same, with --peak; the
# 1 GiB copies (pageable through cudapmr against cudaMemcpyAsync, and pinned).
# From the repository root:
#   apps/bench/run_tables.sh [build-dir]
# Results go to $OUT/tables (or /tmp/cudapmr-gpu/tables): alloc.txt,
# memory.txt (its markdown tables at the end), copies.txt, memory_timeline.csv.
# Each bench runs under a time limit (TABLES_ALLOC_SECONDS, TABLES_MEMORY_SECONDS,
# TABLES_COPY_SECONDS); a bench cut by its limit keeps what it printed, and
# the exit status is then 1. Leaves out the slow entrants that no table
# shows from the allocation bench (cudaMalloc, cub's default bins, the stack's
# variants; the memory bench keeps the variants, which `--with` cannot tell apart).
set -uo pipefail
build=${1:-build}
out=${OUT:-/tmp/cudapmr-gpu}/tables
mkdir -p "$out" && out=$(cd "$out" && pwd)
[[ -d $build ]] && build=$(cd "$build" && pwd)  # the memory bench runs from $out
bench=$build/apps/bench/cudapmr_bench
memory_bench=$build/apps/bench/cudapmr_memory_bench
for program in "$bench" "$memory_bench"; do
  [[ -x $program ]] || { echo "run_tables: $program was not built" >&2; exit 2; }
done
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "run_tables: no GPU on this machine" >&2
  exit 77
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
failed=0
finish() {  # finish NAME STATUS
  if [[ $2 == 0 ]]; then echo "done  $1"; else echo "FAIL  $1 (exit status $2)"; failed=1; fi
}

# The peers and the stacks of the table, at the three sizes, the mix and the
# mix with large requests; threads for the stack and the cache alone.
peers='peer:(cudaMallocAsync|cub::CachingDeviceAllocator\(tuned\)|RMM)'
ours='cudapmr:(device_stack/|caching_resource\(device\)|caching_resource\(device_malloc\)|coalescing_resource\(device_malloc\))'
# The variant that offers a stream's blocks early records events only where blocks pile up: the mixes.
offers='^alloc/device/(mix|mix_to_32MiB)/cudapmr:device_stack \(front offers'
threads='^alloc/device/threads/cudapmr:(device_stack|caching_resource\(device\))/.*/threads:(1|16)$'
filter="^alloc/device/(256B|64KiB|1MiB|mix|mix_to_32MiB)/($peers|$ours)|$offers|$threads"
timeout "${TABLES_ALLOC_SECONDS:-300}" "$bench" --benchmark_filter="$filter" --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true --benchmark_color=false >"$out/alloc.txt" 2>&1
finish "allocation bench ($out/alloc.txt)" $?

(cd "$out" && timeout "${TABLES_MEMORY_SECONDS:-400}" "$memory_bench" --repetitions 3 --peak \
  --timeline memory_timeline.csv --with cudaMallocAsync --with "(tuned)" --with RMM --with "cudapmr:device_stack" \
  --with "caching_resource (pool keeps all)" --with "caching_resource (over device_malloc" \
  --with "coalescing_resource (over device_malloc" >"$out/memory.txt" 2>&1)
finish "memory bench ($out/memory.txt)" $?

timeout "${TABLES_COPY_SECONDS:-120}" "$bench" --benchmark_filter='^copy/(h2d|d2h)/(pinned|pageable)/1GiB/(peer|cudapmr):' \
  --benchmark_repetitions=3 --benchmark_report_aggregates_only=true --benchmark_color=false >"$out/copies.txt" 2>&1
finish "copies of 1 GiB ($out/copies.txt)" $?

echo "---- medians, ns: a pair; a pass of the mix (100,000 operations); a 1 GiB copy"
sed -nE 's#^(\S.*)/min_time:[0-9.]+/(real|manual)_time(/threads:[0-9]+)?_median +([0-9.]+) ns.*#\1\3 \4#p' \
  "$out/alloc.txt" "$out/copies.txt"
exit $failed
