// Paddle CUDA binding for rebuild_padding: allocate, launch, report. Inputs were checked by
// RebuildPadding (cpu_ops/rebuild_padding.cc) before this is called. Index values are not checked
// here (that would need a host sync): the kernel writes a zero row where the CPU op would raise.
#include "op_checks.h"
#include "rebuild_padding_cuda.h"
#include "kernels/rebuild_padding.h"

std::vector<paddle::Tensor> RebuildPaddingCUDA(
    const paddle::Tensor& tmp_out, const paddle::Tensor& cu_seqlens_q,
    const paddle::Tensor& seq_len_this_time, const paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& seq_lens_encoder,
    const paddle::optional<paddle::Tensor>& batch_id_per_token_output,
    const paddle::optional<paddle::Tensor>& cu_seqlens_q_output,
    paddle::optional<paddle::Tensor>& first_token_out, bool enable_logprob) {
  const int64_t token_num = tmp_out.shape()[0];
  const int64_t hidden = tmp_out.shape()[1];
  const int64_t bsz = seq_len_this_time.shape()[0];
  const int64_t rows = batch_id_per_token_output ? batch_id_per_token_output->shape()[0] : bsz;
  const int elem_bytes = tmp_out.dtype() == paddle::DataType::FLOAT32 ? 4 : 2;
  // Uninitialised: the kernel writes every row, zeros included.
  auto out = paddle::empty({rows, hidden}, tmp_out.dtype(), tmp_out.place());
  const int err = specworker_rebuild_padding_launch(
      tmp_out.data(), cu_seqlens_q.data<int32_t>(), seq_len_this_time.data<int32_t>(),
      seq_lens_decoder.data<int32_t>(), seq_lens_encoder.data<int32_t>(),
      batch_id_per_token_output ? batch_id_per_token_output->data<int32_t>() : nullptr,
      cu_seqlens_q_output ? cu_seqlens_q_output->data<int32_t>() : nullptr,
      enable_logprob ? first_token_out->data() : nullptr, enable_logprob ? 1 : 0, out.data(),
      static_cast<int>(token_num), static_cast<int>(bsz), static_cast<int>(rows),
      static_cast<int>(hidden), elem_bytes, tmp_out.stream());
  SPECWORKER_CHECK_LAUNCH("rebuild_padding", err);
  return {out};
}
