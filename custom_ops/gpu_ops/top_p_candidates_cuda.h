// The Paddle CUDA entry point of top_p_candidates, declared once:
// gpu_ops/top_p_candidates.cu defines it,
// cpu_ops/top_p_candidates.cc calls it for GPU inputs.
#pragma once
#include "op_checks.h"

std::vector<paddle::Tensor> TopPCandidatesCUDA(const paddle::Tensor& probs,
                                               const paddle::Tensor& top_p,
                                               const paddle::Tensor& batch_id_per_token_output,
                                               int candidates_len);
