// Paddle CUDA binding for reasoning_phase_token_constraint: launch in place, report. Checks
// are in cpu_ops/reasoning_phase_token_constraint.cc, before the dispatch on place.
#include "op_checks.h"
#include "reasoning_phase_token_constraint_cuda.h"
#include "kernels/reasoning_phase_token_constraint.h"

namespace {

// A zero-size input (no allowed tokens, no rows, no slots) is passed as nullptr; the launcher
// never dereferences it then.
template <typename T>
T* DataOrNull(const paddle::Tensor& x) {
  return x.numel() > 0 ? const_cast<T*>(x.data<T>()) : nullptr;
}

}  // namespace

void ReasoningPhaseTokenConstraintCUDA(
    paddle::Tensor& logits, const paddle::Tensor& pre_ids, const paddle::Tensor& stop_flags,
    const paddle::Tensor& seq_lens_encoder, const paddle::Tensor& step_idx,
    const paddle::Tensor& allowed_tokens, paddle::Tensor& reasoning_status,
    const paddle::Tensor& batch_id_per_token_output, const paddle::Tensor& cu_seqlens_q_output,
    const paddle::Tensor& enable_thinking, int64_t bsz, int64_t think_end_id,
    int64_t line_break_id) {
  const int err = specworker_reasoning_phase_token_constraint_launch(
      DataOrNull<float>(logits), DataOrNull<int64_t>(pre_ids), DataOrNull<bool>(stop_flags),
      DataOrNull<int32_t>(seq_lens_encoder), DataOrNull<int64_t>(step_idx),
      DataOrNull<int64_t>(allowed_tokens), DataOrNull<int32_t>(reasoning_status),
      DataOrNull<int32_t>(batch_id_per_token_output), DataOrNull<int32_t>(cu_seqlens_q_output),
      DataOrNull<bool>(enable_thinking),
      static_cast<int>(logits.shape()[0]), static_cast<int>(logits.shape()[1]),
      static_cast<int>(bsz), static_cast<int>(pre_ids.shape()[1]),
      static_cast<int>(allowed_tokens.shape()[0]), think_end_id, line_break_id, logits.stream());
  SPECWORKER_CHECK_LAUNCH("reasoning_phase_token_constraint", err);
}
