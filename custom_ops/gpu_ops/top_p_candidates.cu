// Paddle CUDA binding for top_p_candidates: allocate, launch, report. Checks are in
// cpu_ops/top_p_candidates.cc, before the dispatch on place.
#include "op_checks.h"
#include "top_p_candidates_cuda.h"
#include "kernels/top_p_candidates.h"

std::vector<paddle::Tensor> TopPCandidatesCUDA(const paddle::Tensor& probs,
                                               const paddle::Tensor& top_p,
                                               const paddle::Tensor& batch_id_per_token_output,
                                               int candidates_len) {
  const int64_t rows = probs.shape()[0];
  const int64_t vocab = probs.shape()[1];
  const int64_t num_slots = top_p.shape()[0];
  auto scores = paddle::empty({rows, candidates_len}, paddle::DataType::FLOAT32, probs.place());
  auto tokens = paddle::empty({rows, candidates_len}, paddle::DataType::INT64, probs.place());
  auto lens = paddle::empty({rows}, paddle::DataType::INT32, probs.place());
  if (rows == 0) return {scores, tokens, lens};
  const int err = specworker_top_p_candidates_launch(
      probs.data<float>(), top_p.numel() > 0 ? top_p.data<float>() : nullptr,
      batch_id_per_token_output.data<int32_t>(),
      static_cast<int>(rows), static_cast<int>(vocab), static_cast<int>(num_slots),
      candidates_len, scores.data<float>(), tokens.data<int64_t>(), lens.data<int32_t>(),
      probs.stream());
  SPECWORKER_CHECK_LAUNCH("top_p_candidates", err);
  return {scores, tokens, lens};
}
