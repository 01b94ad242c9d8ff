# SPDX-License-Identifier: Apache-2.0
# Interop checks (sourced by test/run_gpu_suite.sh with $build and $out set):
# every example program. (DLPack hand-overs to NumPy, CuPy and PyTorch are in the
# Python package's suite, test/python, run by test/python/gpu_check.sh.)
interop_examples=$build/apps/examples
for interop_example in pinned_vector stream_pipeline leak_check thrust_sort; do
  "$interop_examples/$interop_example" >"$out/example-$interop_example.log" 2>&1
  interop_rc=$?
  verdict "example $interop_example" 0 $interop_rc "$(tail -1 "$out/example-$interop_example.log")"
done
# Built only where RMM's wheels were given (CUDAPMR_RMM_ROOT): skipped, and said so, elsewhere.
if [[ -x $interop_examples/rmm_interop ]]; then
  "$interop_examples/rmm_interop" >"$out/example-rmm_interop.log" 2>&1
  interop_rc=$?
  verdict "example rmm_interop" 0 $interop_rc "$(tail -1 "$out/example-rmm_interop.log")"
else
  note "SKIP  example rmm_interop: not built (configure with -DCUDAPMR_RMM_ROOT=)"
fi

