// The Paddle CUDA entry point of speculate_pre_process, declared once:
// gpu_ops/speculate_pre_process.cu defines it,
// cpu_ops/speculate_pre_process.cc calls it for GPU inputs.
#pragma once
#include "op_checks.h"

std::vector<paddle::Tensor> SpeculatePreProcessCUDA(
    const paddle::Tensor& input_ids, const paddle::Tensor& seq_lens_this_time,
    const paddle::optional<paddle::Tensor>& draft_tokens, const paddle::Tensor& seq_lens_encoder,
    int64_t token_num_cpu);
