// The Paddle CUDA entry point of eagle_get_hidden_states, declared once:
// gpu_ops/eagle_get_hidden_states.cu defines it,
// cpu_ops/eagle_get_hidden_states.cc calls it for GPU inputs.
#pragma once
#include "op_checks.h"

std::vector<paddle::Tensor> EagleGetHiddenStatesCUDA(
    const paddle::Tensor& input, const paddle::Tensor& seq_lens_this_time,
    const paddle::Tensor& seq_lens_encoder, const paddle::Tensor& accept_num,
    const paddle::Tensor& target_model_seq_lens_this_time);
