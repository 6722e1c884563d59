// The Paddle CUDA entry point of reasoning_phase_token_constraint, declared once:
// gpu_ops/reasoning_phase_token_constraint.cu defines it,
// cpu_ops/reasoning_phase_token_constraint.cc calls it for GPU inputs.
#pragma once
#include "op_checks.h"

void ReasoningPhaseTokenConstraintCUDA(
    paddle::Tensor& logits, const paddle::Tensor& pre_ids, const paddle::Tensor& stop_flags,
    const paddle::Tensor& seq_lens_encoder, const paddle::Tensor& step_idx,
    const paddle::Tensor& allowed_tokens, paddle::Tensor& reasoning_status,
    const paddle::Tensor& batch_id_per_token_output, const paddle::Tensor& cu_seqlens_q_output,
    const paddle::Tensor& enable_thinking, int64_t bsz, int64_t think_end_id,
    int64_t line_break_id);
