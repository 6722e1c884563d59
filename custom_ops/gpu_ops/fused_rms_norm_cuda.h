// The Paddle CUDA entry point of fused_rms_norm, declared once:
// gpu_ops/fused_rms_norm.cu defines it,
// cpu_ops/fused_rms_norm.cc calls it for GPU inputs with rows > 0, after allocating the outputs.
#pragma once
#include "op_checks.h"

void FusedRmsNormCUDA(const paddle::Tensor& x, const paddle::Tensor& weight,
                      const paddle::optional<paddle::Tensor>& residual, float eps, paddle::Tensor& out,
                      paddle::Tensor& residual_out);
