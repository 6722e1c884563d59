// Paddle CUDA binding for get_padding_offset: allocate, launch, report. Checks run in
// cpu_ops/get_padding_offset.cc before dispatch.
#include "op_checks.h"
#include "get_padding_offset_cuda.h"
#include "kernels/get_padding_offset.h"

std::vector<paddle::Tensor> GetPaddingOffsetCUDA(
    const paddle::optional<paddle::Tensor>& input_ids, const paddle::Tensor& seq_lens_this_time,
    const paddle::optional<paddle::Tensor>& draft_tokens,
    const paddle::optional<paddle::Tensor>& seq_lens_encoder, int64_t token_num_cpu) {
  const int64_t bsz = seq_lens_this_time.shape()[0];
  const auto place = seq_lens_this_time.place();
  auto ids_out = paddle::empty({input_ids ? token_num_cpu : 0}, paddle::DataType::INT64, place);
  auto batch_out = paddle::empty({token_num_cpu}, paddle::DataType::INT32, place);
  auto cu_q = paddle::empty({bsz + 1}, paddle::DataType::INT32, place);
  auto cu_k = paddle::empty({bsz + 1}, paddle::DataType::INT32, place);
  const int err = specworker_get_padding_offset_launch(
      input_ids ? input_ids->data<int64_t>() : nullptr,
      input_ids ? static_cast<int>(input_ids->shape()[1]) : 0,
      seq_lens_this_time.data<int32_t>(),
      draft_tokens ? draft_tokens->data<int64_t>() : nullptr,
      draft_tokens ? static_cast<int>(draft_tokens->shape()[1]) : 0,
      seq_lens_encoder ? seq_lens_encoder->data<int32_t>() : nullptr, static_cast<int>(bsz),
      static_cast<int>(token_num_cpu), input_ids ? ids_out.data<int64_t>() : nullptr,
      batch_out.data<int32_t>(), cu_q.data<int32_t>(), cu_k.data<int32_t>(),
      seq_lens_this_time.stream());
  SPECWORKER_CHECK_LAUNCH("get_padding_offset", err);
  return {ids_out, batch_out, cu_q, cu_k};
}
