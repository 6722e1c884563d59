#!/bin/bash
# Device call 1 (repo root; build.sh's libraries carried in build/issue22l): the harness build in the background;
# the GEMM A/B (lin_ab.py: HEAD vs working tree vs tile 16 forced, cuBLAS, bits); the attention A/B (ab.py: HEAD,
# working tree, fzB; all 32 shapes, torch.equal of out and caches); bits.py HEAD vs working tree; both test files
# on the working tree; seen_failing.py (lin_broken / lin_new); compute-sanitizer memcheck of the attention file and
# of the linear file's tile tests.
export PYTHONUNBUFFERED=1
out=${OUT:-gpu_out}; mkdir -p "$out"
D=benchmarks/results/gpu_logs/issue22l
L=build/issue22l
log=$out/call1.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$log"
(SPECWORKER_GPU_BUILD=/tmp/swk python3 -c "from kernel_harness import kernels_lib; kernels_lib()" > /tmp/hbuild.log 2>&1) &
hb=$!
echo "== lin_ab $(date +%T)" | tee -a "$log"
timeout 100 python3 $D/lin_ab.py $L "$out" --reps 2 2>&1 | tee -a "$log"
echo "== ab $(date +%T)" | tee -a "$log"
timeout 170 python3 $D/ab.py $L /tmp/ab --variants pa_old,pa_new,pa_fzB --shapes all --reps 2 2>&1 | tee -a "$log"
cp /tmp/ab/ab.json "$out/ab_all.json"
echo "== bits $(date +%T)" | tee -a "$log"
timeout 60 python3 $D/bits.py $L pa_old pa_new 2>&1 | tail -6 | tee -a "$log"
wait $hb; tail -2 /tmp/hbuild.log >> "$log"
export SPECWORKER_GPU_BUILD=/tmp/swk
echo "== pytest $(date +%T)" | tee -a "$log"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_paged_attention_bf16_cuda.py \
  tests/gpu/test_batch_invariant_linear_bf16_cuda.py > "$out/pytest.log" 2>&1
grep -E "^(FAILED|ERROR)" "$out/pytest.log" | head; tail -2 "$out/pytest.log" | tee -a "$log"
echo "== seen failing $(date +%T)" | tee -a "$log"
timeout 80 python3 $D/seen_failing.py $L lin_broken lin_new 2>&1 | tee -a "$log"
echo "== memcheck $(date +%T)" | tee -a "$log"
timeout 150 compute-sanitizer --tool memcheck --print-limit 20 python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_paged_attention_bf16_cuda.py tests/gpu/test_batch_invariant_linear_bf16_cuda.py \
  -k "paged_attention or every_tile or persistent_tiles or prefix_rows" > "$out/memcheck.log" 2>&1
grep -E "passed|failed|ERROR SUMMARY" "$out/memcheck.log" | tail -3 | tee -a "$log"
echo "== end $(date +%T)" | tee -a "$log"
