// The Paddle CUDA entry point of get_padding_offset, declared once:
// gpu_ops/get_padding_offset.cu defines it,
// cpu_ops/get_padding_offset.cc calls it for GPU inputs.
#pragma once
#include "op_checks.h"

std::vector<paddle::Tensor> GetPaddingOffsetCUDA(
    const paddle::optional<paddle::Tensor>& input_ids, const paddle::Tensor& seq_lens_this_time,
    const paddle::optional<paddle::Tensor>& draft_tokens,
    const paddle::optional<paddle::Tensor>& seq_lens_encoder, int64_t token_num_cpu);
