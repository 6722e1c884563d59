#!/bin/bash
# Device call 2 (repo root; build.sh 2's libraries carried in build/issue22l; the attention kernel is back to HEAD):
# the harness build in the background; the GEMM A/B with the final picker (lin_ab.py); both test files on the
# working tree; seen_failing.py (lin_broken / lin_new); the two benchmarks; compute-sanitizer memcheck of both files.
export PYTHONUNBUFFERED=1
out=${OUT:-gpu_out}; mkdir -p "$out"
D=benchmarks/results/gpu_logs/issue22l
L=build/issue22l
log=$out/call2.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$log"
(SPECWORKER_GPU_BUILD=/tmp/swk python3 -c "from kernel_harness import kernels_lib; kernels_lib()" > /tmp/hbuild.log 2>&1) &
hb=$!
echo "== lin_ab $(date +%T)" | tee -a "$log"
timeout 100 python3 $D/lin_ab.py $L "$out" --reps 2 2>&1 | tee -a "$log"
wait $hb; tail -2 /tmp/hbuild.log >> "$log"
export SPECWORKER_GPU_BUILD=/tmp/swk
echo "== pytest $(date +%T)" | tee -a "$log"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_paged_attention_bf16_cuda.py \
  tests/gpu/test_batch_invariant_linear_bf16_cuda.py > "$out/pytest.log" 2>&1
grep -E "^(FAILED|ERROR)" "$out/pytest.log" | head; tail -2 "$out/pytest.log" | tee -a "$log"
echo "== seen failing $(date +%T)" | tee -a "$log"
timeout 80 python3 $D/seen_failing.py $L lin_broken lin_new 2>&1 | tee -a "$log"
echo "== gpu_bf16_linear $(date +%T)" | tee -a "$log"
timeout 150 python3 benchmarks/gpu_bf16_linear.py --out "$out/gpu_bf16_linear.json" > "$out/bench_linear.log" 2>&1
tail -62 "$out/bench_linear.log" | tee -a "$log"
echo "== gpu_paged_attention_bf16 $(date +%T)" | tee -a "$log"
timeout 100 python3 benchmarks/gpu_paged_attention_bf16.py --out "$out/gpu_paged_attention_bf16.json" \
  > "$out/bench_attention.log" 2>&1
tail -36 "$out/bench_attention.log" | tee -a "$log"
echo "== memcheck $(date +%T)" | tee -a "$log"
timeout 200 compute-sanitizer --tool memcheck --print-limit 20 python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_paged_attention_bf16_cuda.py tests/gpu/test_batch_invariant_linear_bf16_cuda.py \
  > "$out/memcheck.log" 2>&1
echo "memcheck exit $?" | tee -a "$log"
grep -E "passed|failed|ERROR SUMMARY" "$out/memcheck.log" | tail -3 | tee -a "$log"
echo "== end $(date +%T)" | tee -a "$log"
