#!/bin/bash
# Device call 2: the decode A/B three more times (old / lb / new interleaved), then ncu of the chunk kernel, old
# against new, on SmolLM2 ctx 512 batch 32 and Llama ctx 512 batch 8 decode.
export PYTHONUNBUFFERED=1
out=${OUT:-gpu_out}; mkdir -p "$out"
[ -d .swk/ab ] || { mkdir -p .swk && tar xJf .swk/carry/pack.tar.xz -C .swk; }
D=benchmarks/results/gpu_logs/issue22j
for i in 1 2 3; do python3 $D/ab.py .swk/ab "$out/ab$i" --shapes decode 2>&1 | grep -E "^(smollm|llama3|old|lb|new|all)"; done \
  | tee "$out/ab_decode_x3.log"
for shape in "smollm2-135m 32 512" "llama3-8b 8 512"; do
  for v in old new; do
    timeout 120 ncu --kernel-name regex:ChunkKernel --launch-skip 1 --launch-count 1 --section SpeedOfLight \
      --section Occupancy --section LaunchStats --section WarpStateStats --section InstructionStats \
      --section SchedulerStats python3 $D/prof.py .swk/ab $v $shape 2>&1
  done
done | tee "$out/ncu.txt" | grep -E "ok$|Duration|Executed Instructions  |Registers Per|Theoretical Occ|Achieved Occ|Warp Cycles Per Issued|Issued Warp"
