// The Paddle CUDA entry point of draft_model_postprocess, declared once:
// gpu_ops/draft_model_postprocess.cu defines it,
// cpu_ops/draft_model_postprocess.cc calls it for GPU inputs.
#pragma once
#include "op_checks.h"

void DraftModelPostprocessCUDA(const paddle::Tensor& base_model_draft_tokens,
                               paddle::Tensor& base_model_seq_lens_this_time,
                               const paddle::Tensor& base_model_seq_lens_encoder,
                               const paddle::Tensor& base_model_stop_flags,
                               const paddle::optional<paddle::Tensor>& base_model_is_block_step);
