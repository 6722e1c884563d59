#!/bin/bash
# Device call 4 (repo root; build.sh 4's libraries carried in build/issue22k): the harness build in the background;
# the A/B of old / v2 / v3 / new on all 32 shapes; bits.py old against new; the attention test file and its
# compute-sanitizer memcheck on the working tree; the new test against broken.so and new.so; the benchmark script.
export PYTHONUNBUFFERED=1
out=${OUT:-gpu_out}; mkdir -p "$out"
D=benchmarks/results/gpu_logs/issue22k
L=build/issue22k
log=$out/call4.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$log"
(SPECWORKER_GPU_BUILD=/tmp/swk python3 -c "from kernel_harness import kernels_lib; kernels_lib()" > /tmp/hbuild.log 2>&1) &
hb=$!
timeout 150 python3 $D/ab.py $L /tmp/ab --variants old,v2,v3,new --shapes all --reps 2 2>&1 | tee -a "$log"
cp /tmp/ab/ab.json "$out/ab_all.json"
timeout 120 python3 $D/bits.py $L old new 2>&1 | tail -12 | tee -a "$log"
wait $hb; tail -2 /tmp/hbuild.log >> "$log"
export SPECWORKER_GPU_BUILD=/tmp/swk
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_paged_attention_bf16_cuda.py > "$out/pytest.log" 2>&1
tail -3 "$out/pytest.log" | tee -a "$log"
timeout 90 python3 $D/seen_failing.py $L broken new 2>&1 | tail -16 | tee -a "$log"
timeout 200 compute-sanitizer --tool memcheck --print-limit 20 python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_paged_attention_bf16_cuda.py > "$out/memcheck.log" 2>&1
grep -E "passed|failed|ERROR SUMMARY" "$out/memcheck.log" | tail -3 | tee -a "$log"
timeout 150 python3 benchmarks/gpu_paged_attention_bf16.py --out "$out/gpu_paged_attention_bf16.json" > "$out/bench.log" 2>&1
tail -36 "$out/bench.log" | tee -a "$log"
