// The Paddle CUDA entry point of paged_attention, declared once:
// gpu_ops/paged_attention.cu defines it,
// cpu_ops/paged_attention.cc calls it for GPU inputs.
#pragma once
#include "op_checks.h"

std::vector<paddle::Tensor> PagedAttentionCUDA(
    const paddle::Tensor& q, const paddle::Tensor& k, const paddle::Tensor& v,
    paddle::Tensor& key_cache, paddle::Tensor& value_cache, const paddle::Tensor& block_tables,
    const paddle::Tensor& cu_seqlens_q, const paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& seq_lens_this_time, const paddle::Tensor& batch_id_per_token,
    int block_size, float scale);
