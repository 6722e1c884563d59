#!/bin/bash
# One device call (repo root; build.sh's outputs carried in .swk): the MMA symmetry check, the attention tests and
# their memcheck (tools/gpu_session.sh, harness library prebuilt), the A/B of old / lb / new, the benchmark script.
set -o pipefail
export PYTHONUNBUFFERED=1
out=${OUT:-gpu_out}; mkdir -p "$out"
[ -f .swk/carry/pack.tar.xz ] && tar xJf .swk/carry/pack.tar.xz -C .swk
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; .swk/mma_symmetry; } 2>&1 | tee "$out/mma_symmetry.log"
mkdir -p /tmp/swk && cp .swk/hbuild/*.so /tmp/swk/
tar czf /tmp/empty.tgz -T /dev/null
TESTS=tests/gpu/test_paged_attention_bf16_cuda.py SKIP_BINDINGS=1 MEMCHECK_TIMEOUT=${MEMCHECK_TIMEOUT:-240} \
  bash tools/gpu_session.sh /tmp/empty.tgz
[ -n "${SKIP_AB:-}" ] || python3 benchmarks/results/gpu_logs/issue22j/ab.py .swk/ab "$out/ab" ${AB_SHAPES:+--shapes $AB_SHAPES} 2>&1 | tee "$out/ab.log"
[ -n "${SKIP_BENCH:-}" ] || SPECWORKER_GPU_BUILD=/tmp/swk timeout 200 python3 benchmarks/gpu_paged_attention_bf16.py \
  --out "$out/gpu_paged_attention_bf16.json" 2>&1 | tee "$out/bench.log"
