// Paddle CUDA binding for speculate_pre_process: allocate, launch, report. Checks run in
// cpu_ops/speculate_pre_process.cc before dispatch.
#include "op_checks.h"
#include "speculate_pre_process_cuda.h"
#include "kernels/speculate_pre_process.h"

std::vector<paddle::Tensor> SpeculatePreProcessCUDA(
    const paddle::Tensor& input_ids, const paddle::Tensor& seq_lens_this_time,
    const paddle::optional<paddle::Tensor>& draft_tokens, const paddle::Tensor& seq_lens_encoder,
    int64_t token_num_cpu) {
  const int64_t bsz = seq_lens_this_time.shape()[0];
  const int64_t width = draft_tokens ? draft_tokens->shape()[1] : 1;
  const int64_t capacity = bsz * width;
  const auto place = seq_lens_this_time.place();
  const auto i32 = paddle::DataType::INT32;
  auto ids = paddle::empty({token_num_cpu}, paddle::DataType::INT64, place);
  auto batch_id = paddle::empty({token_num_cpu}, i32, place);
  auto cu_q = paddle::empty({bsz + 1}, i32, place);
  auto cu_k = paddle::empty({bsz + 1}, i32, place);
  auto cu_out = paddle::empty({bsz + 1}, i32, place);
  auto batch_id_out = paddle::empty({capacity}, i32, place);
  auto num_out = paddle::empty({1}, i32, place);
  auto lens_out = paddle::empty({bsz}, i32, place);
  const int err = specworker_speculate_pre_process_launch(
      input_ids.data<int64_t>(), static_cast<int>(input_ids.shape()[1]),
      seq_lens_this_time.data<int32_t>(),
      draft_tokens ? draft_tokens->data<int64_t>() : nullptr,
      draft_tokens ? static_cast<int>(width) : 0, seq_lens_encoder.data<int32_t>(),
      static_cast<int>(bsz), static_cast<int>(token_num_cpu), static_cast<int>(capacity),
      ids.data<int64_t>(), batch_id.data<int32_t>(), cu_q.data<int32_t>(), cu_k.data<int32_t>(),
      cu_out.data<int32_t>(), batch_id_out.data<int32_t>(), num_out.data<int32_t>(),
      lens_out.data<int32_t>(), seq_lens_this_time.stream());
  SPECWORKER_CHECK_LAUNCH("speculate_pre_process", err);
  return {ids, batch_id, cu_q, cu_k, cu_out, batch_id_out, num_out, lens_out};
}
