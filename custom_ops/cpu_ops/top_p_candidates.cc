// top_p_candidates: the top-C candidates of every logit row and its top-p candidate count.
//   probs [rows, V] f32, top_p [N] (or [N, 1]) f32, batch_id_per_token_output [>= rows] i32;
//   attrs candidates_len C in [1, 100], max_seq_len (FastDeploy's legacy attribute, unused)
//   -> verify_scores [rows, C] f32, verify_tokens [rows, C] i64, actual_candidate_lens [rows] i32.
// Row t of slot b = batch_id_per_token_output[t] ranks probs[t] by (prob desc, id asc), a NaN
// prob ranking as -inf; actual_candidate_lens[t] is the smallest m in [1, min(C, V)] whose fp32
// running sum of the first m scores reaches top_p[b], and min(C, V) when it never does ([ours]:
// FastDeploy leaves 0, which rejects every draft). Only the first actual_candidate_lens[t]
// entries are candidates (the top-p set): every entry past it holds token -1 and score 0, as do
// rows with batch id -1 (length 0) and the entries past V when V < C. FastDeploy zero-fills
// (token 0, score 0) past the length; [ours] writes -1, the "no token" sentinel, because 0 is a
// vocabulary id: a consumer that compares a draft with an entry past the length (FastDeploy's
// verify-window fallback reads the second entry unconditionally) must never find a match.
// On CPU a batch id outside [-1, N) is an error; the CUDA kernel treats such a row as skipped.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "op_checks.h"

#ifdef SPECWORKER_WITH_CUDA
#include "top_p_candidates_cuda.h"
#endif

namespace {

constexpr const char* kOp = "top_p_candidates";
constexpr int kMaxCandidates = 100;

std::vector<paddle::Tensor> TopPCandidatesCPU(const paddle::Tensor& probs,
                                              const paddle::Tensor& top_p,
                                              const paddle::Tensor& batch_id_per_token_output,
                                              int C) {
  const int64_t rows = probs.shape()[0];
  const int64_t V = probs.shape()[1];
  const int64_t N = top_p.shape()[0];
  auto scores = paddle::empty({rows, C}, paddle::DataType::FLOAT32, probs.place());
  auto tokens = paddle::empty({rows, C}, paddle::DataType::INT64, probs.place());
  auto lens = paddle::empty({rows}, paddle::DataType::INT32, probs.place());
  const float* p = probs.data<float>();
  const float* top_p_data = top_p.data<float>();
  const int32_t* batch_ids = batch_id_per_token_output.data<int32_t>();
  float* out_p = scores.data<float>();
  int64_t* out_id = tokens.data<int64_t>();
  int32_t* out_len = lens.data<int32_t>();

  const int64_t num_real = std::min<int64_t>(C, V);
  std::vector<float> row(V);
  std::vector<int64_t> order(V);
  for (int64_t t = 0; t < rows; ++t) {
    const int32_t b = batch_ids[t];
    PD_CHECK(b >= -1 && b < N, kOp, ": batch_id_per_token_output[", t, "] = ", b,
             ", expected -1 (no slot) or a slot in [0, ", N, ")");
    float* sp = out_p + t * C;
    int64_t* si = out_id + t * C;
    if (b < 0) {
      std::fill(sp, sp + C, 0.f);
      std::fill(si, si + C, int64_t{-1});
      out_len[t] = 0;
      continue;
    }
    for (int64_t v = 0; v < V; ++v) {
      const float x = p[t * V + v];
      row[v] = std::isnan(x) ? -std::numeric_limits<float>::infinity() : x;
    }
    std::iota(order.begin(), order.end(), int64_t{0});
    std::partial_sort(order.begin(), order.begin() + num_real, order.end(),
                      [&](int64_t a, int64_t c) {
                        return row[a] > row[c] || (row[a] == row[c] && a < c);
                      });
    float cum = 0.f;
    int64_t len = num_real;
    for (int64_t r = 0; r < num_real; ++r) {
      sp[r] = row[order[r]];
      si[r] = order[r];
      cum += sp[r];
      if (cum >= top_p_data[b]) {
        len = r + 1;
        break;
      }
    }
    std::fill(sp + len, sp + C, 0.f);  // past the top-p set: no candidate
    std::fill(si + len, si + C, int64_t{-1});
    out_len[t] = static_cast<int32_t>(len);
  }
  return {scores, tokens, lens};
}

}  // namespace

std::vector<paddle::Tensor> TopPCandidates(const paddle::Tensor& probs,
                                           const paddle::Tensor& top_p,
                                           const paddle::Tensor& batch_id_per_token_output,
                                           int candidates_len, int max_seq_len) {
  specworker::CheckGiven(kOp, {{"probs", &probs}, {"top_p", &top_p},
                               {"batch_id_per_token_output", &batch_id_per_token_output}});
  (void)max_seq_len;  // FastDeploy [A] decoded rows with it; batch ids make it unnecessary
  using specworker::ShapeStr;
  specworker::CheckDtype(kOp, "probs", probs, paddle::DataType::FLOAT32);
  specworker::CheckRank(kOp, "probs", probs, 2);
  const int64_t rows = probs.shape()[0];
  const int64_t V = probs.shape()[1];
  PD_CHECK(V >= 1, kOp, ": probs has shape ", ShapeStr(probs.shape()),
           ", expected a vocab dimension >= 1");
  PD_CHECK(rows <= std::numeric_limits<int32_t>::max() &&
               V <= std::numeric_limits<int32_t>::max(),
           kOp, ": probs has shape ", ShapeStr(probs.shape()), ", expected both dims < 2^31");
  PD_CHECK(candidates_len >= 1 && candidates_len <= kMaxCandidates, kOp,
           ": candidates_len = ", candidates_len, ", expected 1 <= candidates_len <= ",
           kMaxCandidates);
  specworker::CheckPerSlot(kOp, "top_p", top_p, paddle::DataType::FLOAT32);
  specworker::CheckDtype(kOp, "batch_id_per_token_output", batch_id_per_token_output,
                         paddle::DataType::INT32);
  specworker::CheckRank(kOp, "batch_id_per_token_output", batch_id_per_token_output, 1);
  PD_CHECK(batch_id_per_token_output.shape()[0] >= rows, kOp,
           ": batch_id_per_token_output has ", batch_id_per_token_output.shape()[0],
           " entries, expected at least one per probs row (", rows, ")");
  specworker::CheckSamePlace(kOp, "top_p", top_p, probs, "probs");
  specworker::CheckSamePlace(kOp, "batch_id_per_token_output", batch_id_per_token_output, probs,
                             "probs");
  if (probs.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    return TopPCandidatesCUDA(probs, top_p, batch_id_per_token_output, candidates_len);
#else
    PD_THROW(kOp, ": got a GPU tensor but the extension was built without CUDA");
#endif
  }
  return TopPCandidatesCPU(probs, top_p, batch_id_per_token_output, candidates_len);
}

std::vector<std::vector<int64_t>> TopPCandidatesInferShape(
    const std::vector<int64_t>& probs, const std::vector<int64_t>&, const std::vector<int64_t>&,
    int candidates_len, int) {
  return {{probs[0], candidates_len}, {probs[0], candidates_len}, {probs[0]}};
}

std::vector<paddle::DataType> TopPCandidatesInferDtype(const paddle::DataType&,
                                                       const paddle::DataType&,
                                                       const paddle::DataType&) {
  return {paddle::DataType::FLOAT32, paddle::DataType::INT64, paddle::DataType::INT32};
}

PD_BUILD_OP(top_p_candidates)
    .Inputs({"probs", "top_p", "batch_id_per_token_output"})
    .Outputs({"verify_scores", "verify_tokens", "actual_candidate_lens"})
    .Attrs({"candidates_len: int", "max_seq_len: int"})
    .SetKernelFn(PD_KERNEL(TopPCandidates))
    .SetInferShapeFn(PD_INFER_SHAPE(TopPCandidatesInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(TopPCandidatesInferDtype));
