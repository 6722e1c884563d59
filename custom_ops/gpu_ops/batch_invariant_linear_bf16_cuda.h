// The Paddle CUDA entry point of batch_invariant_linear_bf16, declared once:
// gpu_ops/batch_invariant_linear_bf16.cu defines it,
// cpu_ops/batch_invariant_linear_bf16.cc calls it for GPU inputs.
#pragma once
#include "op_checks.h"

std::vector<paddle::Tensor> BatchInvariantLinearBf16CUDA(const paddle::Tensor& x, const paddle::Tensor& weight,
                                                         const paddle::optional<paddle::Tensor>& bias);
