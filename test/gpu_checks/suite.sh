# SPDX-License-Identifier: Apache-2.0
# Sourced by test/run_gpu_check.sh ($build, $out, verdict): the GoogleTest
# suite, whole, on the GPU, and the host-exhaustion program (its leaf test
# needs the GPU).
"$build/test/cudapmr_tests" --gtest_brief=1 >"$out/tests.log" 2>&1
rc=$?
verdict "tests" 0 $rc "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/tests.log" | tr '\n' ' ')"
"$build/test/cudapmr_cccl_tests" --gtest_brief=1 >"$out/cccl-tests.log" 2>&1
rc=$?
verdict "CCCL tests" 0 $rc "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/cccl-tests.log" | tr '\n' ' ')"
"$build/test/reliability/cudapmr_allocation_failure_tests" --gtest_brief=1 >"$out/allocation-failure-tests.log" 2>&1
rc=$?
verdict "allocation failure tests" 0 $rc "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/allocation-failure-tests.log" | tr '\n' ' ')"
