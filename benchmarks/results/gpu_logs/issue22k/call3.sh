#!/bin/bash
# Device call 3 (repo root; build.sh 3's libraries carried in build/issue22k): the harness build in the background;
# the A/B of old / v2 / new on all 32 shapes; bits.py old against new; the per-block trace of new; the attention test
# file and its compute-sanitizer memcheck on the working tree; the new test against broken.so, new.so and v2.so; the
# benchmark script (new) into gpu_paged_attention_bf16.json.
export PYTHONUNBUFFERED=1
out=${OUT:-gpu_out}; mkdir -p "$out"
D=benchmarks/results/gpu_logs/issue22k
L=build/issue22k
log=$out/call3.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$log"
(SPECWORKER_GPU_BUILD=/tmp/swk python3 -c "from kernel_harness import kernels_lib; kernels_lib()" > /tmp/hbuild.log 2>&1) &
hb=$!
timeout 150 python3 $D/ab.py $L /tmp/ab --variants old,v2,new --shapes all --reps 2 2>&1 | tee -a "$log"
cp /tmp/ab/ab.json "$out/ab_all.json"
timeout 120 python3 $D/bits.py $L old new 2>&1 | tail -12 | tee -a "$log"
timeout 60 python3 $D/trace.py $L smollm2-135m 32 512 1 smollm2-135m 128 512 1 llama3-8b 128 512 1 2>&1 | tee "$out/trace.log"
wait $hb; tail -2 /tmp/hbuild.log >> "$log"
export SPECWORKER_GPU_BUILD=/tmp/swk
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_paged_attention_bf16_cuda.py > "$out/pytest.log" 2>&1
tail -3 "$out/pytest.log" | tee -a "$log"
timeout 90 python3 $D/seen_failing.py $L broken new v2 2>&1 | tail -24 | tee -a "$log"
timeout 150 compute-sanitizer --tool memcheck --print-limit 20 python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_paged_attention_bf16_cuda.py > "$out/memcheck.log" 2>&1
grep -E "passed|failed|ERROR SUMMARY" "$out/memcheck.log" | tail -3 | tee -a "$log"
timeout 150 python3 benchmarks/gpu_paged_attention_bf16.py --out "$out/gpu_paged_attention_bf16.json" > "$out/bench.log" 2>&1
tail -36 "$out/bench.log" | tee -a "$log"
