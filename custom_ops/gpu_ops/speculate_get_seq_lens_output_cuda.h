// The Paddle CUDA entry point of speculate_get_seq_lens_output, declared once:
// gpu_ops/speculate_get_seq_lens_output.cu defines it,
// cpu_ops/speculate_get_seq_lens_output.cc calls it for GPU inputs.
#pragma once
#include "op_checks.h"

std::vector<paddle::Tensor> SpeculateGetSeqLensOutputCUDA(const paddle::Tensor& seq_lens_this_time,
                                                          const paddle::Tensor& seq_lens_encoder);
