// Paddle CUDA binding for hybrid_mtp_ngram: the op (cpu_ops/hybrid_mtp_ngram.cc) has checked every
// argument; this takes the stream, launches in place and reports.
#include "op_checks.h"
#include "kernels/hybrid_mtp_ngram.h"

void HybridMtpNgramCUDA(const paddle::Tensor& input_ids, const paddle::Tensor& input_ids_len,
                        const paddle::Tensor& pre_ids, const paddle::Tensor& step_idx,
                        const paddle::Tensor& draft_token_num, paddle::Tensor& draft_tokens,
                        paddle::Tensor& seq_lens_this_time, const paddle::Tensor& seq_lens_decoder,
                        const paddle::Tensor& max_dec_len,
                        const paddle::optional<paddle::Tensor>& seq_lens_encoder,
                        int max_ngram_size, int min_ngram_size, int max_draft_tokens,
                        int num_model_steps) {
  const int err = specworker_hybrid_mtp_ngram_launch(
      input_ids.data<int64_t>(), input_ids_len.data<int64_t>(), pre_ids.data<int64_t>(),
      step_idx.data<int64_t>(), draft_token_num.data<int32_t>(), draft_tokens.data<int64_t>(),
      seq_lens_this_time.data<int32_t>(), seq_lens_decoder.data<int32_t>(),
      max_dec_len.data<int64_t>(),
      seq_lens_encoder ? seq_lens_encoder->data<int32_t>() : nullptr,
      static_cast<int>(seq_lens_this_time.shape()[0]), static_cast<int>(input_ids.shape()[1]),
      static_cast<int>(pre_ids.shape()[1]), static_cast<int>(draft_tokens.shape()[1]),
      max_ngram_size, min_ngram_size, max_draft_tokens, num_model_steps,
      seq_lens_this_time.stream());
  SPECWORKER_CHECK_LAUNCH("hybrid_mtp_ngram", err);
}
