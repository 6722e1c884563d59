// The Paddle CUDA entry point of speculate_verify, declared once:
// gpu_ops/speculate_verify.cu defines it,
// cpu_ops/speculate_verify.cc calls it for GPU inputs.
#pragma once
#include "op_checks.h"

void SpeculateVerifyCUDA(
    const paddle::Tensor& sampled_token_ids, paddle::Tensor& accept_tokens,
    paddle::Tensor& accept_num, paddle::Tensor& step_idx, paddle::Tensor& stop_flags,
    const paddle::Tensor& seq_lens_encoder, const paddle::Tensor& draft_tokens,
    const paddle::Tensor& seq_lens_this_time, const paddle::Tensor& verify_tokens,
    const paddle::Tensor& verify_scores, const paddle::Tensor& max_dec_len,
    const paddle::Tensor& end_tokens, const paddle::Tensor& is_block_step,
    const paddle::Tensor& cu_seqlens_q_output, const paddle::Tensor& actual_candidate_len,
    const paddle::Tensor& topp, const paddle::optional<paddle::Tensor>& target_probs,
    const paddle::optional<paddle::Tensor>& draft_probs,
    const paddle::optional<paddle::Tensor>& infer_seed,
    const paddle::optional<paddle::Tensor>& reasoning_status, int verify_window,
    int verify_strategy, int accept_policy, bool enable_topp);
