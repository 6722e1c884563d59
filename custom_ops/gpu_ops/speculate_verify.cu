// Paddle CUDA binding for speculate_verify: the op (cpu_ops/speculate_verify.cc) has checked every
// argument and resolved the modes; this takes the stream, launches in place and reports.
#include "op_checks.h"
#include "speculate_verify_cuda.h"
#include "kernels/speculate_verify.h"

namespace {

template <typename T>
const T* OptData(const paddle::optional<paddle::Tensor>& t) {
  return t ? t->data<T>() : nullptr;
}

}  // namespace

void SpeculateVerifyCUDA(
    const paddle::Tensor& sampled_token_ids, paddle::Tensor& accept_tokens,
    paddle::Tensor& accept_num, paddle::Tensor& step_idx, paddle::Tensor& stop_flags,
    const paddle::Tensor& seq_lens_encoder, const paddle::Tensor& draft_tokens,
    const paddle::Tensor& seq_lens_this_time, const paddle::Tensor& verify_tokens,
    const paddle::Tensor& verify_scores, const paddle::Tensor& max_dec_len,
    const paddle::Tensor& end_tokens, const paddle::Tensor& is_block_step,
    const paddle::Tensor& cu_seqlens_q_output, const paddle::Tensor& actual_candidate_len,
    const paddle::Tensor& topp, const paddle::optional<paddle::Tensor>& target_probs,
    const paddle::optional<paddle::Tensor>& draft_probs,
    const paddle::optional<paddle::Tensor>& infer_seed,
    const paddle::optional<paddle::Tensor>& reasoning_status, int verify_window,
    int verify_strategy, int accept_policy, bool enable_topp) {
  const int bsz = static_cast<int>(seq_lens_this_time.shape()[0]);
  const int vocab = target_probs ? static_cast<int>(target_probs->shape()[1]) : 0;
  const int err = specworker_speculate_verify_launch(
      sampled_token_ids.data<int64_t>(), accept_tokens.data<int64_t>(),
      accept_num.data<int32_t>(), step_idx.data<int64_t>(), stop_flags.data<bool>(),
      seq_lens_encoder.data<int32_t>(), draft_tokens.data<int64_t>(),
      seq_lens_this_time.data<int32_t>(), verify_tokens.data<int64_t>(),
      verify_scores.data<float>(), max_dec_len.data<int64_t>(), end_tokens.data<int64_t>(),
      is_block_step.data<bool>(), cu_seqlens_q_output.data<int32_t>(),
      actual_candidate_len.data<int32_t>(), topp.data<float>(), OptData<float>(target_probs),
      OptData<float>(draft_probs), OptData<int64_t>(infer_seed),
      OptData<int32_t>(reasoning_status), bsz, static_cast<int>(accept_tokens.shape()[1]),
      static_cast<int>(sampled_token_ids.shape()[0]), static_cast<int>(verify_tokens.shape()[1]),
      vocab, static_cast<int>(end_tokens.shape()[0]), verify_window, verify_strategy,
      accept_policy, enable_topp ? 1 : 0, accept_tokens.stream());
  SPECWORKER_CHECK_LAUNCH("speculate_verify", err);
}
