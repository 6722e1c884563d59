// The Paddle CUDA entry point of speculate_update, declared once:
// gpu_ops/speculate_update.cu defines it,
// cpu_ops/speculate_update.cc calls it for GPU inputs.
#pragma once
#include "op_checks.h"

void SpeculateUpdateCUDA(paddle::Tensor& seq_lens_encoder, paddle::Tensor& seq_lens_decoder,
                         paddle::Tensor& not_need_stop, paddle::Tensor& draft_tokens,
                         paddle::Tensor& actual_draft_token_nums,
                         const paddle::Tensor& accept_tokens, const paddle::Tensor& accept_num,
                         const paddle::Tensor& stop_flags, const paddle::Tensor& seq_lens_this_time,
                         const paddle::Tensor& is_block_step, const paddle::Tensor& stop_nums,
                         paddle::optional<paddle::Tensor>& mask_rollback);
