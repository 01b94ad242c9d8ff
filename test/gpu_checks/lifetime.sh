# SPDX-License-Identifier: Apache-2.0
# Sourced by test/run_gpu_check.sh ($build, $out, verdict): processes that end
# with memory still pooled, cached, or held by buffers whose stream or resource
# is gone (test/reliability/lifetime_exit.cpp): each must exit with
# status 0; "gpu-pooled" reports its one abandoned buffer on stderr.
lifetime_binary=$build/test/reliability/cudapmr_lifetime_exit
for lifetime_scenario in host-static host-copy-at-exit gpu-pooled gpu-exit gpu-staging-at-exit gpu-default-stack; do
  if [[ ! -x $lifetime_binary ]]; then
    verdict "exit $lifetime_scenario" 0 1 "$lifetime_binary was not built"
    continue
  fi
  "$lifetime_binary" "$lifetime_scenario" >"$out/exit-$lifetime_scenario.log" 2>&1
  lifetime_rc=$?
  verdict "exit $lifetime_scenario" 0 $lifetime_rc "$(tr '\n' ' ' <"$out/exit-$lifetime_scenario.log")"
done
