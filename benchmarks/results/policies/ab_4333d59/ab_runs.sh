#!/bin/bash
# tag B warmup reps pairs
tag=$1; B=$2; W=$3; R=$4; P=$5
for i in $(seq 1 $P); do
  for v in old new; do
    d=/tmp/old21; [ $v = new ] && d=/tmp/ci18d
    cd $d && PR_OUT=/tmp/d21/ab_${tag}_${v}.jsonl .venv/bin/python /tmp/d21/pr.py bench --config configs/mtp_tiny.yaml --policies none,fixed1,fixed2,fixed3,adaptive --batch-sizes $B --max-tokens 96 --warmup $W --repeats $R --lockstep --out /tmp/d21/ab_${tag}_${v}_$i > /dev/null 2>&1
  done
done
echo done > /tmp/d21/ab_${tag}.done
