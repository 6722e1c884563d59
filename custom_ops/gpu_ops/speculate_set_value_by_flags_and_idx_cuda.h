// The Paddle CUDA entry point of speculate_set_value_by_flags_and_idx, declared once:
// gpu_ops/speculate_set_value_by_flags_and_idx.cu defines it,
// cpu_ops/speculate_set_value_by_flags_and_idx.cc calls it for GPU inputs.
#pragma once
#include "op_checks.h"

void SpeculateSetValueByFlagsAndIdxCUDA(paddle::Tensor& pre_ids_all,
                                        const paddle::Tensor& accept_tokens,
                                        paddle::Tensor& accept_num,
                                        const paddle::Tensor& stop_flags,
                                        const paddle::Tensor& seq_lens_this_time,
                                        const paddle::Tensor& seq_lens_encoder,
                                        paddle::Tensor& seq_lens_decoder,
                                        const paddle::Tensor& step_idx);
