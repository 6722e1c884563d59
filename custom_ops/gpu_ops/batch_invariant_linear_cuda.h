// The Paddle CUDA entry point of batch_invariant_linear, declared once:
// gpu_ops/batch_invariant_linear.cu defines it,
// cpu_ops/batch_invariant_linear.cc calls it for GPU inputs.
#pragma once
#include "op_checks.h"

std::vector<paddle::Tensor> BatchInvariantLinearCUDA(const paddle::Tensor& x,
                                                     const paddle::Tensor& weight,
                                                     const paddle::optional<paddle::Tensor>& bias);
