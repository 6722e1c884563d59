// The Paddle CUDA entry point of draft_model_preprocess, declared once:
// gpu_ops/draft_model_preprocess.cu defines it,
// cpu_ops/draft_model_preprocess.cc calls it for GPU inputs.
#pragma once
#include "op_checks.h"

void DraftModelPreprocessCUDA(
    const paddle::Tensor& draft_tokens, const paddle::Tensor& input_ids,
    const paddle::Tensor& stop_flags, const paddle::Tensor& seq_lens_this_time,
    const paddle::Tensor& seq_lens_encoder, const paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& step_idx, const paddle::Tensor& not_need_stop,
    const paddle::Tensor& pre_ids, const paddle::Tensor& accept_tokens,
    const paddle::Tensor& accept_num, const paddle::Tensor& target_model_seq_lens_decoder,
    const paddle::Tensor& target_model_step_idx, const paddle::Tensor& target_model_stop_flags,
    const paddle::Tensor& max_dec_len, const paddle::Tensor& target_model_draft_tokens,
    const paddle::optional<paddle::Tensor>& target_model_is_block_step, int num_model_steps,
    bool is_splitwise_prefill, bool truncate_first_token);
