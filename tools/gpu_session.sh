#!/usr/bin/env bash
# Everything the GPU machine checks in one call (it has nvcc, CuPy and PyTorch, no Paddle):
# Paddle CUDA bindings compile, standalone kernel tests, compute-sanitizer memcheck over them,
# and the benchmarks. Usage on that machine, from the repo root:
#   tools/gpu_session.sh PADDLE_INCLUDE_TGZ [benchmarks...]
# Logs and JSON go to $OUT (or ./gpu_out).
set -uo pipefail
tgz=${1:?usage: $0 PADDLE_INCLUDE_TGZ [benchmark.py ...]}
shift
out=${OUT:-gpu_out}
mkdir -p "$out" /tmp/pinc
export PYTHONUNBUFFERED=1 SPECWORKER_GPU_BUILD=/tmp/swk
tar xzf "$tgz" -C /tmp/pinc
status=0
echo "== paddle CUDA bindings"
tools/check_paddle_cuda_bindings.sh /tmp/pinc/include sm_90 >"$out/bindings.log" 2>&1 || status=1
grep -E "binding (ok|FAILED)|paddle-cuda-bindings" "$out/bindings.log"
echo "== tests/gpu"
python3 -m pytest -q -p no:cacheprovider tests/gpu >"$out/gpu_tests.log" 2>&1 || status=1
tail -3 "$out/gpu_tests.log"
echo "== compute-sanitizer memcheck"
timeout "${MEMCHECK_TIMEOUT:-300}" compute-sanitizer --tool memcheck --print-limit 20 python3 -m pytest -q -p no:cacheprovider tests/gpu \
  >"$out/memcheck.log" 2>&1 || status=1
grep -E "passed|failed|ERROR SUMMARY" "$out/memcheck.log" | tail -3
for bench in "$@"; do
  echo "== $bench"
  timeout "${BENCH_TIMEOUT:-150}" python3 "$bench" --out "$out/$(basename "$bench" .py).json" 2>&1 \
    | tee -a "$out/bench.log" | tail -"${BENCH_TAIL:-14}" || status=1
done
exit $status
