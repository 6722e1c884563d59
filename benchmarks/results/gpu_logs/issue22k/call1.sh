#!/bin/bash
# Device call 1 (repo root; build.sh's libraries carried in build/issue22k): the harness build in the background,
# the decode A/B of old / new / the attribution builds, the per-block trace of new, the A/B of old / new on all 32
# shapes, ncu source counters of the chunk kernel on two decode shapes, then the attention test file on new.
export PYTHONUNBUFFERED=1
out=${OUT:-gpu_out}; mkdir -p "$out"
D=benchmarks/results/gpu_logs/issue22k
L=build/issue22k
log=$out/call1.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$log"
(SPECWORKER_GPU_BUILD=/tmp/swk python3 -c "from kernel_harness import kernels_lib; kernels_lib()" > /tmp/hbuild.log 2>&1) &
hb=$!
timeout 150 python3 $D/ab.py $L /tmp/ab_dec --variants old,new,oldapp,oldcomb,early --shapes decode --reps 2 2>&1 | tee -a "$log"
cp /tmp/ab_dec/ab.json "$out/ab_decode.json"
timeout 60 python3 $D/trace.py $L 2>&1 | tee "$out/trace.log"
timeout 120 python3 $D/ab.py $L /tmp/ab_all --variants old,new --shapes all --reps 2 2>&1 | tee -a "$log"
cp /tmp/ab_all/ab.json "$out/ab_all.json"
for shape in "smollm2-135m 128 512" "smollm2-135m 32 512"; do
  set -- $shape
  rep=/tmp/ncu_$1_$2_$3
  timeout 90 ncu --clock-control none -k regex:ChunkKernel --launch-skip 2 --launch-count 1 --import-source yes \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section InstructionStats --section SchedulerStats --section SourceCounters -o $rep \
    python3 $D/prof.py $L new $shape >> "$log" 2>&1
  ncu -i $rep.ncu-rep --page details >> "$out/ncu_details.txt" 2>&1
  ncu -i $rep.ncu-rep --page source --csv --print-source sass > "$out/ncu_sass_$2.csv" 2>&1
done
wait $hb; tail -3 /tmp/hbuild.log >> "$log"
cp $L/new.so /tmp/new.so
SPECWORKER_GPU_BUILD=/tmp/swk timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_paged_attention_bf16_cuda.py 2>&1 | tail -15 | tee -a "$log"
