#!/bin/bash
# Builds the A/B libraries of paged_attention_bf16.cu for sm_90a into $1 (default .swk): old.so (the committed
# kernel, git HEAD) and new.so (the working tree), each with the SW_FORCE hook of force_hook.py (SW_FORCE=path:splits
# picks the launch path, 1 fused / 2 two launches / 3 three launches, and the split count; unset: the launcher's own).
set -e
cd "$(dirname "$0")/../../../.."
OUTD=${1:-.swk}; mkdir -p "$OUTD"
K=custom_ops/gpu_ops/kernels
git show HEAD:$K/paged_attention_bf16.cu > "$OUTD/old.cu"
cp $K/paged_attention_bf16.cu "$OUTD/new.cu"
for v in old new; do
  python3 benchmarks/results/gpu_logs/issue22i/force_hook.py "$OUTD/$v.cu" "$OUTD/${v}_hook.cu"
  nvcc -O3 -std=c++17 -Xcompiler -fPIC -gencode=arch=compute_90a,code=sm_90a -I$K -shared -o "$OUTD/$v.so" "$OUTD/${v}_hook.cu" &
done
wait
ls -la "$OUTD"/*.so
