#!/bin/bash
# One device call (run from the repo root: `bash benchmarks/results/gpu_logs/issue22f/ab_call.sh`): the warp-slices
# patch A/B against the committed kernel on 10 decode shapes (the faster is kept, only if the bits are the same),
# then the attention and swiglu tests, the replay and attention benchmarks, and memcheck. Logs and JSON in $OUT.
cd "$(dirname "$0")/../../../.."
export PYTHONUNBUFFERED=1 SPECWORKER_GPU_BUILD=/tmp/swk
nvidia-smi --query-gpu=name --format=csv,noheader
t0=$(date +%s)
K=custom_ops/gpu_ops/kernels/paged_attention_bf16.cu; cp $K /tmp/pa_old.cu
P=benchmarks/results/gpu_logs/issue22f/paged_attention_bf16_warp_slices.patch; git apply $P 2>/dev/null || patch -p1 < $P || exit 1
cp $K $OUT/pa_new.cu
(python3 -c "from kernel_harness import kernels_lib; kernels_lib()" > /tmp/build.log 2>&1; touch /tmp/built) &
SW_WAIT=/tmp/built SW_VARIANTS="old:0:0:2,new:0:0:2" timeout 150 python3 benchmarks/results/gpu_logs/issue22f/pa_ab.py /tmp/sweep 2>&1 | grep -v Warning | tee -a $OUT/ab.log
if [ "$(cat /tmp/sweep/keep 2>/dev/null)" != new ]; then
  cp /tmp/pa_old.cu $K; rm -rf /tmp/swk; echo "== KEPT OLD KERNEL"
  python3 -c "from kernel_harness import kernels_lib; kernels_lib()" > /tmp/build.log 2>&1
fi
echo "== ab done $(( $(date +%s) - t0 ))s"
T="tests/gpu/test_paged_attention_bf16_cuda.py tests/gpu/test_fused_swiglu_bf16_cuda.py"
timeout 100 python3 -m pytest -q -p no:cacheprovider $T > $OUT/gpu_tests.log 2>&1
grep -E "^(FAILED|ERROR)" $OUT/gpu_tests.log | head -3; tail -1 $OUT/gpu_tests.log
echo "== tests done $(( $(date +%s) - t0 ))s"
timeout 120 python3 benchmarks/gpu_step_replay.py --out $OUT/gpu_step_replay.json 2>&1 | tee $OUT/replay.log | tail -22
echo "== replay done $(( $(date +%s) - t0 ))s"
timeout 90 python3 benchmarks/gpu_paged_attention_bf16.py --out $OUT/gpu_paged_attention_bf16.json 2>&1 | tee $OUT/attn.log | tail -34
echo "== attention done $(( $(date +%s) - t0 ))s"
timeout 90 compute-sanitizer --tool memcheck --print-limit 20 python3 -m pytest -q -p no:cacheprovider $T > $OUT/memcheck.log 2>&1
grep -E "passed|failed|ERROR SUMMARY|Invalid" $OUT/memcheck.log | tail -3
echo "== all done $(( $(date +%s) - t0 ))s"
