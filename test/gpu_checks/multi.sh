# SPDX-License-Identifier: Apache-2.0
# Multi-GPU and multi-process checks, sourced by test/run_gpu_check.sh
# with $build and $out set, from the repository root; reports with `verdict`.
#  1. cudapmr_multiprocess_tests: IPC between two processes on one GPU, the
#     socket helper, NCCL communicators and registration (kept out of the
#     memcheck pass, see test/multiprocess/CMakeLists.txt);
#  2. the multi-GPU tests of cudapmr_tests, which skip with fewer than two GPUs;
#  3. apps/collective on every visible GPU: one process driving all GPUs, one
#     process per GPU, and ranks started on their own with NCCL_COMM_ID (the
#     way a multi-node job starts them); its bandwidth tables go to $out.
# Variables are prefixed multi_ because this file runs in the suite's shell.

multi_tests=$build/test/multiprocess/cudapmr_multiprocess_tests
multi_collective=$build/apps/collective/collective
if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
  multi_gpus=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)
else
  multi_gpus=$(nvidia-smi --list-gpus 2>/dev/null | grep -c '^GPU')
fi

# NCCL's library: the programs' run path names the toolkit's copy, and the
# system's is found by the loader; failing both, take the Python environment's
# nvidia-nccl package.
multi_library_path=${LD_LIBRARY_PATH:-}
if [[ -x $multi_collective ]] && ldd "$multi_collective" | grep -q 'libnccl.so.2 => not found'; then
  multi_nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  multi_library_path=$multi_nccl_dir${multi_library_path:+:$multi_library_path}
fi
echo "multi: $multi_gpus GPU(s); libnccl.so.2 from: $(LD_LIBRARY_PATH=$multi_library_path ldd "$multi_collective" 2>/dev/null | awk '/libnccl/ {print $3}')"

# NVLink SHARP (multicast) stays off, as the multi-GPU machines require; no run may hang the suite.
multi_run() { NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$multi_library_path timeout 300 "$@"; }
multi_summary() { grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?' "$1" | tr '\n' ' '; }
multi_table() { grep -E '^# (Out of bounds|Avg bus)' "$1" | tr '\n' ' '; }

# 1. The multi-process tests, and proof that the two-process IPC test ran rather than skipped.
multi_run "$multi_tests" >"$out/multiprocess-tests.log" 2>&1
multi_rc=$?
verdict "multiprocess tests (IPC, socket helper, NCCL)" 0 $multi_rc "$(multi_summary "$out/multiprocess-tests.log")"
grep -q '^\[       OK \] Ipc.AnotherProcessReadsAndWritesThePoolsMemory' "$out/multiprocess-tests.log"
multi_rc=$?
verdict "IPC: a second process read and wrote the pool's memory" 0 $multi_rc ""

# 2. The multi-GPU tests of the main suite: with one GPU, those needing two show as skipped.
multi_run "$build/test/cudapmr_tests" --gtest_filter='MultiDevice.*:PeerAccess.*:DeviceCopyRoute.*:Nccl*' \
  >"$out/multi-gpu-tests.log" 2>&1
multi_rc=$?
verdict "multi-GPU tests ($multi_gpus GPU(s))" 0 $multi_rc "$(multi_summary "$out/multi-gpu-tests.log")"

# 3. The collective in every mode, checked element by element, 1 MiB to 1 GiB.
for multi_mode in one-process process-per-gpu; do
  multi_run "$multi_collective" --mode $multi_mode >"$out/collective-$multi_mode.log" 2>&1
  multi_rc=$?
  verdict "collective $multi_mode on $multi_gpus GPU(s)" 0 $multi_rc "$(multi_table "$out/collective-$multi_mode.log")"
done

# Ranks started on their own, meeting at NCCL_COMM_ID: how a job across nodes starts.
multi_comm_id=127.0.0.1:$((20000 + RANDOM % 20000))
multi_pids=()
for ((multi_rank = 0; multi_rank < multi_gpus; multi_rank++)); do
  NCCL_COMM_ID=$multi_comm_id multi_run "$multi_collective" --rank "$multi_rank" --ranks "$multi_gpus" \
    --max-bytes 64MiB >"$out/collective-rank$multi_rank.log" 2>&1 &
  multi_pids+=($!)
done
multi_rc=0
for multi_pid in "${multi_pids[@]}"; do
  wait "$multi_pid" || multi_rc=$?
done
verdict "collective ranks via NCCL_COMM_ID ($multi_gpus rank(s))" 0 $multi_rc "$(multi_table "$out/collective-rank0.log")"

multi_run "$multi_collective" --max-bytes 3 >/dev/null 2>"$out/collective-refusal.txt"
multi_rc=$?
verdict "collective --max-bytes 3" 2 $multi_rc "-> $(head -1 "$out/collective-refusal.txt")"

echo "---- collective, one process driving $multi_gpus GPU(s) ----"
cat "$out/collective-one-process.log"
echo "---- collective, one process per GPU ----"
cat "$out/collective-process-per-gpu.log"
