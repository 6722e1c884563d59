#!/usr/bin/env bash
# The bf16 GPU checks of issue 22 in one call on the GPU machine (nvcc, CuPy, PyTorch, no Paddle): the Paddle
# CUDA bindings compile (in the background), the bf16 kernels' tests, compute-sanitizer memcheck over a subset of
# them, then the given benchmarks. Usage on that machine, from the repo root:
#   tools/gpu_bf16_session.sh PADDLE_INCLUDE_TGZ [benchmark.py ...]
# Env: TESTS (pytest paths), MEMCHECK_K (pytest -k of the memcheck run, empty: skip), BENCH_TIMEOUT (s),
# SKIP_BINDINGS=1 (no bindings compile).
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
tests=${TESTS:-tests/gpu/test_paged_attention_bf16_cuda.py tests/gpu/test_paged_attention_cuda.py tests/gpu/test_batch_invariant_linear_bf16_cuda.py}
echo "== tests/gpu: $tests"
# shellcheck disable=SC2086
python3 -m pytest -q -p no:cacheprovider --durations=5 $tests >"$out/gpu_tests.log" 2>&1 || status=1
grep -E "^(FAILED|ERROR)" "$out/gpu_tests.log" | head -20
tail -12 "$out/gpu_tests.log"
if [ -n "${MEMCHECK_K:-}" ]; then
  echo "== compute-sanitizer memcheck (-k $MEMCHECK_K)"
  # shellcheck disable=SC2086
  timeout "${MEMCHECK_TIMEOUT:-200}" compute-sanitizer --tool memcheck --print-limit 20 python3 -m pytest -q \
    -p no:cacheprovider $tests -k "$MEMCHECK_K" >"$out/memcheck.log" 2>&1 || status=1
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
  grep -E "binding (FAILED)|paddle-cuda-bindings|paged_attention|linear_bf16" "$out/bindings.log" | head
fi
exit $status
