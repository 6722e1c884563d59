// The Paddle CUDA entry point of rebuild_padding, declared once:
// gpu_ops/rebuild_padding.cu defines it,
// cpu_ops/rebuild_padding.cc calls it for GPU inputs.
#pragma once
#include "op_checks.h"

std::vector<paddle::Tensor> RebuildPaddingCUDA(
    const paddle::Tensor& tmp_out, const paddle::Tensor& cu_seqlens_q,
    const paddle::Tensor& seq_len_this_time, const paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& seq_lens_encoder,
    const paddle::optional<paddle::Tensor>& batch_id_per_token_output,
    const paddle::optional<paddle::Tensor>& cu_seqlens_q_output,
    paddle::optional<paddle::Tensor>& first_token_out, bool enable_logprob);
