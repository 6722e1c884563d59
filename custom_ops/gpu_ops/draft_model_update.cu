// Paddle CUDA binding for draft_model_update: the op (cpu_ops/draft_model_update.cc) has checked
// every argument; this takes the stream, launches in place and reports.
#include "op_checks.h"
#include "draft_model_update_cuda.h"
#include "kernels/draft_model_update.h"

void DraftModelUpdateCUDA(const paddle::Tensor& inter_next_tokens, paddle::Tensor& draft_tokens,
                          paddle::Tensor& pre_ids, paddle::Tensor& seq_lens_this_time,
                          paddle::Tensor& seq_lens_encoder, paddle::Tensor& seq_lens_decoder,
                          paddle::Tensor& step_idx, const paddle::Tensor& cu_seqlens_q_output,
                          paddle::Tensor& stop_flags, paddle::Tensor& not_need_stop,
                          const paddle::Tensor& max_dec_len,
                          paddle::Tensor& base_model_draft_tokens, int substep) {
  const int err = specworker_draft_model_update_launch(
      inter_next_tokens.data<int64_t>(), static_cast<int>(inter_next_tokens.shape()[0]),
      draft_tokens.data<int64_t>(), static_cast<int>(draft_tokens.shape()[1]),
      pre_ids.data<int64_t>(), static_cast<int>(pre_ids.shape()[1]),
      seq_lens_this_time.data<int32_t>(), seq_lens_encoder.data<int32_t>(),
      seq_lens_decoder.data<int32_t>(), step_idx.data<int64_t>(),
      cu_seqlens_q_output.data<int32_t>(), stop_flags.data<bool>(), not_need_stop.data<bool>(),
      max_dec_len.data<int64_t>(), base_model_draft_tokens.data<int64_t>(),
      static_cast<int>(base_model_draft_tokens.shape()[1]),
      static_cast<int>(seq_lens_this_time.shape()[0]), substep, seq_lens_this_time.stream());
  SPECWORKER_CHECK_LAUNCH("draft_model_update", err);
}
