// Paddle CUDA binding for speculate_get_token_penalty_multi_scores: launch in place, report.
// Shapes, dtypes and places were checked by the op in cpu_ops/ before it dispatched here.
#include <limits>

#include "op_checks.h"
#include "speculate_get_token_penalty_multi_scores_cuda.h"
#include "kernels/speculate_get_token_penalty_multi_scores.h"

namespace {

int AsInt(const char* what, int64_t v) {
  PD_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(),
           "speculate_get_token_penalty_multi_scores: ", what, " = ", v,
           " does not fit the CUDA launcher's int sizes");
  return static_cast<int>(v);
}

}  // namespace

void SpeculateGetTokenPenaltyMultiScoresCUDA(
    const paddle::Tensor& pre_ids, paddle::Tensor& logits, const paddle::Tensor& penalty_scores,
    const paddle::Tensor& frequency_scores, const paddle::Tensor& presence_scores,
    const paddle::Tensor& temperatures, const paddle::Tensor& bad_tokens,
    const paddle::Tensor& bad_tokens_len, const paddle::Tensor& cur_len,
    const paddle::Tensor& min_len, const paddle::Tensor& eos_token_id,
    const paddle::Tensor& seq_lens_this_time, const paddle::Tensor& batch_id_per_token_output,
    const paddle::Tensor& cu_seqlens_q_output, const paddle::optional<paddle::Tensor>& draft_tokens) {
  const int rows = AsInt("logits rows", logits.shape()[0]);
  if (rows == 0) return;
  int dtype = SPECWORKER_LOGITS_FLOAT32;
  if (logits.dtype() == paddle::DataType::FLOAT16) dtype = SPECWORKER_LOGITS_FLOAT16;
  if (logits.dtype() == paddle::DataType::BFLOAT16) dtype = SPECWORKER_LOGITS_BFLOAT16;
  const int err = specworker_speculate_get_token_penalty_multi_scores_launch(
      pre_ids.data<int64_t>(), logits.data(), dtype, penalty_scores.data<float>(),
      frequency_scores.data<float>(), presence_scores.data<float>(), temperatures.data<float>(),
      bad_tokens.data<int64_t>(), bad_tokens_len.data<int64_t>(), cur_len.data<int64_t>(),
      min_len.data<int64_t>(), eos_token_id.data<int64_t>(),
      batch_id_per_token_output.data<int32_t>(), cu_seqlens_q_output.data<int32_t>(),
      draft_tokens ? draft_tokens->data<int64_t>() : nullptr, rows,
      AsInt("V", logits.shape()[1]), AsInt("bsz", seq_lens_this_time.shape()[0]),
      AsInt("S", pre_ids.shape()[1]), AsInt("W", bad_tokens.shape()[1]),
      AsInt("E", eos_token_id.shape()[0]), draft_tokens ? AsInt("D", draft_tokens->shape()[1]) : 0,
      logits.stream());
  SPECWORKER_CHECK_LAUNCH("speculate_get_token_penalty_multi_scores", err);
}
