// Paddle CUDA binding for speculate_update: launch on the inputs' stream, report. In place;
// checks run in cpu_ops/speculate_update.cc before dispatch.
#include "op_checks.h"
#include "speculate_update_cuda.h"
#include "kernels/speculate_update.h"

void SpeculateUpdateCUDA(paddle::Tensor& seq_lens_encoder, paddle::Tensor& seq_lens_decoder,
                         paddle::Tensor& not_need_stop, paddle::Tensor& draft_tokens,
                         paddle::Tensor& actual_draft_token_nums,
                         const paddle::Tensor& accept_tokens, const paddle::Tensor& accept_num,
                         const paddle::Tensor& stop_flags, const paddle::Tensor& seq_lens_this_time,
                         const paddle::Tensor& is_block_step, const paddle::Tensor& stop_nums,
                         paddle::optional<paddle::Tensor>& mask_rollback) {
  const int err = specworker_speculate_update_launch(
      seq_lens_encoder.data<int32_t>(), seq_lens_decoder.data<int32_t>(),
      not_need_stop.data<bool>(), draft_tokens.data<int64_t>(),
      actual_draft_token_nums.data<int32_t>(), accept_tokens.data<int64_t>(),
      accept_num.data<int32_t>(), stop_flags.data<bool>(), seq_lens_this_time.data<int32_t>(),
      is_block_step.data<bool>(), stop_nums.data<int64_t>(),
      mask_rollback ? mask_rollback->data<int32_t>() : nullptr,
      static_cast<int>(seq_lens_this_time.shape()[0]), static_cast<int>(stop_flags.shape()[0]),
      static_cast<int>(draft_tokens.shape()[1]), seq_lens_this_time.stream());
  SPECWORKER_CHECK_LAUNCH("speculate_update", err);
}
