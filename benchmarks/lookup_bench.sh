#!/usr/bin/env bash
# The lookup-speculation bench of README "Results": every prompt set of benchmarks/prompts at batch 1, 4 and 16,
# speculative (the given config) against non-speculative in the same process, prompts through the chat
# template, each run taking the next prompts of the set. JSON in benchmarks/results/lookup/<method>_<set>_b<B>.json.
#   benchmarks/lookup_bench.sh configs/smollm2_ngram.yaml [sets...]
# Shorter runs on a busy machine: MAX_TOKENS (default 64), B1_REPEATS (5), B4_REPEATS (3), B16_REPEATS (2).
set -euo pipefail
config=$1; shift
sets=("${@:-rewrite code_fix passage_qa open_ended}")
read -r -a sets <<< "${sets[*]}"
method=$(basename "$config" .yaml); method=${method#smollm2_}
out=benchmarks/results/lookup
mkdir -p "$out"
run() {  # batch warmup repeats set
  local dir=build/bench/lookup/${method}_$4_b$1
  nice .venv/bin/python -m specworker bench --config "$config" --prompts "benchmarks/prompts/$4.jsonl" --chat \
    --rotate-prompts --batch-sizes "$1" --warmup "$2" --repeats "$3" --max-tokens "${MAX_TOKENS:-64}" --out "$dir"
  cp "$dir/bench.json" "$out/${method}_$4_b$1.json"
}
for s in "${sets[@]}"; do run 1 1 "${B1_REPEATS:-5}" "$s"; done
for s in "${sets[@]}"; do run 4 1 "${B4_REPEATS:-3}" "$s"; done
for s in "${sets[@]}"; do run 16 0 "${B16_REPEATS:-2}" "$s"; done
