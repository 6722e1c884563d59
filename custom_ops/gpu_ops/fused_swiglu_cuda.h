// The Paddle CUDA entry point of fused_swiglu, declared once:
// gpu_ops/fused_swiglu.cu defines it,
// cpu_ops/fused_swiglu.cc calls it for GPU inputs with rows > 0, after allocating the output.
#pragma once
#include "op_checks.h"

void FusedSwigluCUDA(const paddle::Tensor& gate_up, paddle::Tensor& out);
