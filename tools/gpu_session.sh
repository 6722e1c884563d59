#!/usr/bin/env bash
# Everything the GPU machine checks in one call (it has nvcc, CuPy and PyTorch, no Paddle): the Paddle CUDA
# bindings compile (in the background, against Paddle's headers from PADDLE_INCLUDE_TGZ), the standalone
# kernel tests, compute-sanitizer memcheck over them, then the given benchmarks. Usage on that machine, from
# the repo root:
#   tools/gpu_session.sh PADDLE_INCLUDE_TGZ [benchmark.py ...]
# Env: TESTS (pytest paths, default tests/gpu), MEMCHECK_TESTS (default: TESTS), MEMCHECK_K (pytest -k of the memcheck run; unset: every test,
# "-": no memcheck), MEMCHECK_TIMEOUT / BENCH_TIMEOUT (s), SKIP_BINDINGS=1 (no bindings compile).
# Logs and JSON go to $OUT (or ./gpu_out).
set -uo pipefail
tgz=${1:?usage: $0 PADDLE_INCLUDE_TGZ [benchmark.py ...]}
shift
out=${OUT:-gpu_out}
mkdir -p "$out" /tmp/pinc
export PYTHONUNBUFFERED=1 SPECWORKER_GPU_BUILD=/tmp/swk
tar xzf "$tgz" -C /tmp/pinc
status=0
bindings=
if [ -z "${SKIP_BINDINGS:-}" ]; then
  tools/check_paddle_cuda_bindings.sh /tmp/pinc/include sm_90 >"$out/bindings.log" 2>&1 &
  bindings=$!
fi
start=$(date +%s)
python3 -c "from kernel_harness import kernels_lib; kernels_lib()" || exit 1
echo "== harness build $(( $(date +%s) - start ))s"
tests=${TESTS:-tests/gpu}
echo "== tests: $tests"
# shellcheck disable=SC2086
python3 -m pytest -q -p no:cacheprovider --durations=5 $tests >"$out/gpu_tests.log" 2>&1 || status=1
grep -E "^(FAILED|ERROR)" "$out/gpu_tests.log" | head -20
tail -3 "$out/gpu_tests.log"
memcheck_k=${MEMCHECK_K-}
if [ "$memcheck_k" != "-" ]; then
  echo "== compute-sanitizer memcheck${memcheck_k:+ (-k $memcheck_k)}"
  # shellcheck disable=SC2086
  timeout "${MEMCHECK_TIMEOUT:-300}" compute-sanitizer --tool memcheck --print-limit 20 python3 -m pytest -q \
    -p no:cacheprovider ${MEMCHECK_TESTS:-$tests} ${memcheck_k:+-k "$memcheck_k"} >"$out/memcheck.log" 2>&1 || status=1
  grep -E "passed|failed|ERROR SUMMARY|Invalid" "$out/memcheck.log" | tail -5
fi
for bench in "$@"; do
  echo "== $bench"
  timeout "${BENCH_TIMEOUT:-200}" python3 "$bench" --out "$out/$(basename "$bench" .py).json" 2>&1 \
    | tee -a "$out/bench.log" | tail -"${BENCH_TAIL:-40}" || status=1
done
if [ -n "$bindings" ]; then
  wait "$bindings" || status=1
  echo "== paddle CUDA bindings"
  grep -E "binding FAILED|paddle-cuda-bindings" "$out/bindings.log" | head
fi
exit $status
