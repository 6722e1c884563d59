#!/usr/bin/env bash
# Compile every Paddle CUDA binding (custom_ops/gpu_ops/*.cu) with nvcc -DPADDLE_WITH_CUDA
# against Paddle's C++ headers, on a machine that has nvcc and the pip CUDA headers but no
# Paddle (the GPU test machine). Usage:
#   tools/check_paddle_cuda_bindings.sh PADDLE_INCLUDE_DIR [ARCH]
# PADDLE_INCLUDE_DIR is site-packages/paddle/include of any Paddle 3.x wheel.
set -euo pipefail
inc=${1:?usage: $0 PADDLE_INCLUDE_DIR [sm_XX]}
arch=${2:-sm_90}
nv=$(python3 -c "import nvidia, os; print(list(nvidia.__path__)[0])")
pyinc=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
flags=(-c -std=c++17 -O3 "-arch=$arch" -diag-suppress 20012,68,737,815 -DPADDLE_WITH_CUDA -DSPECWORKER_WITH_CUDA
       -Icustom_ops/include -Icustom_ops/gpu_ops
       "-I$inc" "-I$inc/third_party" "-I$inc/paddle/phi/api/include/compat"
       "-I$nv/cu13/include" "-I$nv/cudnn/include" "-I$pyinc")
out=$(mktemp -d)
# One nvcc per binding, all in parallel; each prints its own pass line and time.
compile_one() {
  local f=$1 start ms
  start=$(date +%s%N)
  nvcc "${flags[@]}" "$f" -o "$out/$(basename "$f" .cu).o" || { echo "binding FAILED: $f"; return 1; }
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  printf 'binding ok: %-50s %d.%03ds\n' "$f" $((ms / 1000)) $((ms % 1000))
}
# The CPU registrations' CUDA branch (behind SPECWORKER_WITH_CUDA) must compile too.
cudainc=$(dirname "$(command -v nvcc)")/../include
compile_cc() {
  local f=$1 start ms
  start=$(date +%s%N)
  g++ -c -std=c++17 -O1 -DPADDLE_WITH_CUDA -DSPECWORKER_WITH_CUDA -Icustom_ops/include -Icustom_ops/gpu_ops \
    "-I$inc" "-I$inc/third_party" "-I$inc/paddle/phi/api/include/compat" "-I$cudainc" "-I$cudainc/cccl" \
    "-I$nv/cu13/include" "-I$nv/cudnn/include" "-I$pyinc" "$f" -o "$out/$(basename "$f" .cc).cc.o" \
    || { echo "binding FAILED: $f"; return 1; }
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  printf 'binding ok: %-50s %d.%03ds\n' "$f" $((ms / 1000)) $((ms % 1000))
}
pids=()
files=(custom_ops/gpu_ops/*.cu custom_ops/cpu_ops/*.cc)
for f in custom_ops/gpu_ops/*.cu; do compile_one "$f" & pids+=($!); done
for f in custom_ops/cpu_ops/*.cc; do compile_cc "$f" & pids+=($!); done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
echo "paddle-cuda-bindings: $(( ${#files[@]} - failed ))/${#files[@]} compiled with -DPADDLE_WITH_CUDA (gpu_ops/*.cu for $arch, cpu_ops/*.cc CUDA branch)"
[ "$failed" -eq 0 ]
