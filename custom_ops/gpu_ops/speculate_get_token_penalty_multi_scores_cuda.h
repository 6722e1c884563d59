// The Paddle CUDA entry point of speculate_get_token_penalty_multi_scores, declared once:
// gpu_ops/speculate_get_token_penalty_multi_scores.cu defines it,
// cpu_ops/speculate_get_token_penalty_multi_scores.cc calls it for GPU inputs.
#pragma once
#include "op_checks.h"

void SpeculateGetTokenPenaltyMultiScoresCUDA(
    const paddle::Tensor& pre_ids, paddle::Tensor& logits, const paddle::Tensor& penalty_scores,
    const paddle::Tensor& frequency_scores, const paddle::Tensor& presence_scores,
    const paddle::Tensor& temperatures, const paddle::Tensor& bad_tokens,
    const paddle::Tensor& bad_tokens_len, const paddle::Tensor& cur_len,
    const paddle::Tensor& min_len, const paddle::Tensor& eos_token_id,
    const paddle::Tensor& seq_lens_this_time, const paddle::Tensor& batch_id_per_token_output,
    const paddle::Tensor& cu_seqlens_q_output, const paddle::optional<paddle::Tensor>& draft_tokens);
