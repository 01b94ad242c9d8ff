# SPDX-License-Identifier: Apache-2.0
# Sourced by test/run_gpu_check.sh ($build, $out, verdict): the demo prints
# the sample's output, line for line, at three sizes, and refuses what it
# cannot use with exit status 2 and one line.
demo=$build/apps/memory_resources/memory_resources
for elements in default 1048576 100000007; do
  args=()
  [[ $elements != default ]] && args=(--elements "$elements")
  "$demo" "${args[@]}" >"$out/demo-$elements.log" 2>&1
  rc=$?
  if sed -E '1s/^Device: .+$/Device: */; 2s/^Compute Capability: [0-9]+\.[0-9]+$/Compute Capability: */' \
       "$out/demo-$elements.log" | diff -q - apps/memory_resources/expected_output.txt >/dev/null; then
    match="output as expected"
  else
    match="output differs"
    rc="$rc, output differs"
  fi
  verdict "demo --elements $elements" 0 "$rc" "$match"
done
cat "$out/demo-default.log"

for bad in "--elements 0" "--elements -5" "--elements abc" "--elements 99999999999999999999" \
           "--elements 100000000000" "--device -1" "--device 9" "--bogus"; do
  # shellcheck disable=SC2086
  "$demo" $bad >/dev/null 2>"$out/refusal.txt"
  rc=$?
  verdict "demo $bad" 2 $rc "-> $(head -1 "$out/refusal.txt")"
done
