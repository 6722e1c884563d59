// Paddle CUDA binding for draft_model_postprocess: the op (cpu_ops/draft_model_postprocess.cc)
// has checked every argument; this takes the stream, launches in place and reports.
#include "op_checks.h"
#include "draft_model_postprocess_cuda.h"
#include "kernels/draft_model_postprocess.h"

void DraftModelPostprocessCUDA(const paddle::Tensor& base_model_draft_tokens,
                               paddle::Tensor& base_model_seq_lens_this_time,
                               const paddle::Tensor& base_model_seq_lens_encoder,
                               const paddle::Tensor& base_model_stop_flags,
                               const paddle::optional<paddle::Tensor>& base_model_is_block_step) {
  const int err = specworker_draft_model_postprocess_launch(
      base_model_draft_tokens.data<int64_t>(),
      static_cast<int>(base_model_draft_tokens.shape()[1]),
      base_model_seq_lens_this_time.data<int32_t>(), base_model_seq_lens_encoder.data<int32_t>(),
      base_model_stop_flags.data<bool>(),
      base_model_is_block_step ? base_model_is_block_step->data<bool>() : nullptr,
      static_cast<int>(base_model_seq_lens_this_time.shape()[0]),
      base_model_seq_lens_this_time.stream());
  SPECWORKER_CHECK_LAUNCH("draft_model_postprocess", err);
}
