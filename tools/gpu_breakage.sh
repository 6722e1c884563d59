#!/usr/bin/env bash
# Shows that the standalone CUDA tests can fail: builds a copy of the kernels with one
# deliberate defect per op, runs that op's GPU tests against it, and expects failures.
# Run on the GPU machine from the repo root. Prints one line per defect: caught / MISSED.
set -uo pipefail
K=custom_ops/gpu_ops/kernels
# op test file | kernel file | sed expression (each must match exactly one line)
cases=(
  "speculate_update|speculate_update.cu|s/for (int b = threadIdx.x; b < bsz; b += kThreads) {/for (int b = threadIdx.x; b < min(bsz, 256); b += kThreads) {/"
  "top_p_candidates|top_p_candidates.cu|s/return p > q || (p == q \&\& i < j);/return p > q || (p == q \&\& i > j);/"
  "speculate_verify|speculate_verify.cu|s/ok = a.cand_ids\[r \* a.C\] == x;/ok = a.cand_ids[r * a.C] != x;/"
  "rebuild_padding|rebuild_padding.cu|s/p.src = start + local;/p.src = start;/"
  "draft_model_update|draft_model_update.cu|s/const int64_t token = a.next_tokens\[end - 1\];/const int64_t token = a.next_tokens[end > 1 ? end - 2 : 0];/"
  "draft_model_postprocess|draft_model_postprocess.cu|s/while (n < width \&\& row\[n\] != -1) ++n;/while (n < width \&\& row[n] != -2) ++n;/"
  "eagle_get_hidden_states|eagle_get_hidden_states.cu|s/draft_enc\[b\] : accept_num\[b\];/draft_enc[b] : accept_num[b] - (accept_num[b] > 1);/"
  "reasoning_phase_token_constraint|reasoning_phase_token_constraint.cu|s/} else if (status == 2) {/} else if (status == 99) {/"
  "speculate_get_token_penalty_multi_scores|speculate_get_token_penalty_multi_scores.cu|s/PenalizeHistory(p, row, c, b, hist, hist + drafts,/PenalizeHistory(p, row, c, b, hist, hist,/"
  "speculate_pre_process|speculate_pre_process.cu|s/  return n <= 0 ? 0 : (n == 1 || e != 0) ? 1 : n;/  return n <= 0 ? 0 : (n == 1) ? 1 : n;/"
  "paged_attention|paged_attention.cu|s/  const int64_t num_keys = r.pos + 1;/  const int64_t num_keys = r.pos;/"
  "batch_invariant_linear|batch_invariant_linear.cu|s/acc\[i\]\[j\] = __fadd_rn(acc\[i\]\[j\], __fmul_rn(a\[i\], b\[j\]));/acc[i][j] = __fmaf_rn(a[i], b[j], acc[i][j]);/"
)
root=$(mktemp -d)
status=0
run_case() {  # op file expr -> one line; runs in its own copy, so cases run in parallel
  local op=$1 file=$2 expr=$3 work="$root/$1"
  mkdir -p "$work"
  cp -r custom_ops tests "$work/"
  local n
  n=$(sed -n "${expr}p" "$K/$file" | wc -l)
  if [ "$n" -ne 1 ]; then echo "breakage $op: sed matched $n lines, fix the expression"; return; fi
  sed -i "$expr" "$work/$K/$file"
  local result
  result=$(cd "$work" && SPECWORKER_GPU_BUILD="$work/_build" python3 -m pytest -q -p no:cacheprovider \
      "tests/gpu/test_${op}_cuda.py" 2>&1 | tail -1)
  case "$result" in
    *failed*) echo "breakage $op ($file): caught -> $result" ;;
    *) echo "breakage $op ($file): MISSED -> $result" ;;
  esac
}
i=0
for c in "${cases[@]}"; do
  IFS='|' read -r op file expr <<<"$c"
  run_case "$op" "$file" "$expr" >"$root/result_$i.txt" 2>&1 &
  i=$((i + 1))
done
wait
for j in $(seq 0 $((i - 1))); do
  cat "$root/result_$j.txt"
  grep -q "caught" "$root/result_$j.txt" || status=1
done
exit $status
