# SPDX-License-Identifier: Apache-2.0
# Interop checks (sourced by test/run_gpu_suite.sh with $build and $out set):
# every example program, and DLPack hand-overs to CuPy and PyTorch.
interop_examples=$build/apps/examples
for interop_example in pinned_vector stream_pipeline leak_check thrust_sort; do
  "$interop_examples/$interop_example" >"$out/example-$interop_example.log" 2>&1
  interop_rc=$?
  verdict "example $interop_example" 0 $interop_rc "$(tail -1 "$out/example-$interop_example.log")"
done

python3 test/gpu_checks/dlpack_check.py "$interop_examples/libcudapmr_dlpack_capsule.so" >"$out/dlpack-check.log" 2>&1
interop_rc=$?
verdict "dlpack to cupy and torch" 0 $interop_rc "$(tail -1 "$out/dlpack-check.log")"
cat "$out/dlpack-check.log"
