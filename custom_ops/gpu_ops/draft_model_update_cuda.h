// The Paddle CUDA entry point of draft_model_update, declared once:
// gpu_ops/draft_model_update.cu defines it,
// cpu_ops/draft_model_update.cc calls it for GPU inputs.
#pragma once
#include "op_checks.h"

void DraftModelUpdateCUDA(const paddle::Tensor& inter_next_tokens, paddle::Tensor& draft_tokens,
                          paddle::Tensor& pre_ids, paddle::Tensor& seq_lens_this_time,
                          paddle::Tensor& seq_lens_encoder, paddle::Tensor& seq_lens_decoder,
                          paddle::Tensor& step_idx, const paddle::Tensor& cu_seqlens_q_output,
                          paddle::Tensor& stop_flags, paddle::Tensor& not_need_stop,
                          const paddle::Tensor& max_dec_len,
                          paddle::Tensor& base_model_draft_tokens, int substep);
