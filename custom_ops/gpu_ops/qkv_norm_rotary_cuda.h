// The Paddle CUDA entry point of qkv_norm_rotary, declared once:
// gpu_ops/qkv_norm_rotary.cu defines it,
// cpu_ops/qkv_norm_rotary.cc calls it for GPU inputs.
#pragma once
#include "op_checks.h"

std::vector<paddle::Tensor> QkvNormRotaryCUDA(const paddle::Tensor& qkv, const paddle::Tensor& cos_full,
                                              const paddle::Tensor& sin_signed,
                                              const paddle::optional<paddle::Tensor>& q_norm_weight,
                                              const paddle::optional<paddle::Tensor>& k_norm_weight, int num_heads,
                                              int num_kv_heads, int head_dim, float eps);
