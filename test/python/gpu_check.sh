#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python package on a GPU machine with no network, from the repository root:
#   OUT=/some/dir test/python/gpu_check.sh WHEELS_DIR
# installs nanobind, scikit-build-core, pytest and hypothesis from the wheels in WHEELS_DIR
# into a venv that still sees the system's numpy, cupy, torch and cuda.core,
# builds and installs cudapmr, then runs pytest, the sample (compared line by
# line with apps/memory_resources/expected_output.txt, where `*` matches
# anything) and the benchmark (with the options in CUDAPMR_BENCH_ARGUMENTS, if
# set). Logs go to $OUT; a summary is printed.
set -uo pipefail
wheels=${1:?usage: OUT=dir test/python/gpu_check.sh WHEELS_DIR}
out=${OUT:?set OUT to a folder for the logs}
mkdir -p "$out"
cd "$(dirname "$0")/../.."
wheels=$(cd "$wheels" && pwd)

summary=()
verdict() { summary+=("$(printf '%-10s %s' "$1" "$2")"); }

# Where python3 already has the build tools and pytest (an image with them), it
# is used as it is: a venv made from a venv would not see that venv's packages.
# Otherwise a venv that sees the system's packages, or the user site.
pip_extra=()
if python3 -c 'import nanobind, scikit_build_core, pytest' >/dev/null 2>&1; then
  python=python3
  verdict ok "nanobind, scikit-build-core and pytest already installed"
else
  venv=${CUDAPMR_VENV:-/tmp/cudapmr-venv}
  if python3 -m venv --system-site-packages "$venv" >"$out/venv.log" 2>&1; then
    python=$venv/bin/python
  else
    python=python3
    pip_extra=(--user --break-system-packages)
  fi
  "$python" -m pip install "${pip_extra[@]}" --no-index --find-links "$wheels" nanobind scikit-build-core pytest >"$out/pip-tools.log" 2>&1
  verdict "$([[ $? == 0 ]] && echo ok || echo FAILED)" "install nanobind, scikit-build-core, pytest from $wheels"
fi

# Hypothesis for the property tests, where the wheels bring it and the image lacks it.
if ! "$python" -c 'import hypothesis' >/dev/null 2>&1; then
  "$python" -m pip install "${pip_extra[@]}" --no-index --find-links "$wheels" hypothesis >"$out/pip-hypothesis.log" 2>&1
  verdict "$([[ $? == 0 ]] && echo ok || echo FAILED)" "install hypothesis from $wheels"
fi

export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-16} CMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES:-90}
start=$SECONDS
"$python" -m pip install "${pip_extra[@]}" -v --no-build-isolation --no-index . >"$out/pip-install.log" 2>&1
install_rc=$?
verdict "$([[ $install_rc == 0 ]] && echo ok || echo FAILED)" "pip install . ($((SECONDS - start)) s; pip-install.log)"
if [[ $install_rc != 0 ]]; then
  tail -30 "$out/pip-install.log"
  printf '%s\n' "${summary[@]}"
  exit 1
fi

(cd /tmp && "$python" -m cudapmr) >"$out/devices.log" 2>&1

"$python" -m pytest -v -rs --durations=15 test/python >"$out/pytest.log" 2>&1
pytest_rc=$?
verdict "$([[ $pytest_rc == 0 ]] && echo ok || echo FAILED)" "pytest: $(tail -1 "$out/pytest.log")"

"$python" apps/python/memory_resources.py >"$out/memory_resources.log" 2>"$out/memory_resources.err"
sample_rc=$?
expected=apps/memory_resources/expected_output.txt
mismatch=""
if [[ $(wc -l <"$expected") != $(wc -l <"$out/memory_resources.log") ]]; then
  mismatch="$(wc -l <"$out/memory_resources.log") lines, expected $(wc -l <"$expected")"
fi
line=0
while IFS= read -r want && IFS= read -r got <&3; do
  line=$((line + 1))
  # Only `*` is a wildcard: the other pattern characters (the `[1]` of a
  # section title, parentheses, `+`) are escaped to stand for themselves.
  pattern=$(printf '%s' "$want" | sed 's/[][?\\()|!+@]/\\&/g')
  [[ $got == $pattern ]] || { mismatch="line $line: '$got' is not '$want'"; break; }
done <"$expected" 3<"$out/memory_resources.log"
if [[ $sample_rc == 0 && -z $mismatch ]]; then
  verdict ok "memory_resources.py prints the sample's output"
else
  verdict FAILED "memory_resources.py: exit $sample_rc ${mismatch} $(tail -1 "$out/memory_resources.err")"
fi

# CUDAPMR_BENCH_ARGUMENTS: bench.py's options where a call has less time (e.g. "--skip-mixed --steps 300").
read -r -a bench_arguments <<<"${CUDAPMR_BENCH_ARGUMENTS:-}"
"$python" apps/python/bench.py "${bench_arguments[@]}" >"$out/bench.md" 2>"$out/bench.err"
bench_rc=$?
verdict "$([[ $bench_rc == 0 ]] && echo ok || echo FAILED)" "bench.py (bench.md)"

echo "--- bench.md"
cat "$out/bench.md"
echo "--- summary"
printf '%s\n' "${summary[@]}"
[[ $pytest_rc == 0 && $sample_rc == 0 && -z $mismatch && $bench_rc == 0 ]]
