// speculate_get_token_penalty_multi_scores: min length, repetition / frequency / presence
// penalties, temperature and bad words, in place on the logit rows of one step.
//   logits [T_out, V] float32 | float16 | bfloat16 (in place; rows past T_out have batch id -1)
//   pre_ids [N, S] int64: generated history, pre_ids[b, 1 .. cur_len[b]] (position 0 unused)
//   penalty_scores (alpha), frequency_scores (beta), presence_scores (gamma), temperatures:
//     [N] (or [N, 1]) float32
//   bad_tokens [N, W] int64 + bad_tokens_len [N] int64; cur_len (= step_idx), min_len [N] int64
//   eos_token_id [E] (or [E, 1]) int64; seq_lens_this_time [bsz] int32 (only bsz is read)
//   batch_id_per_token_output [capacity >= T_out] int32 (-1: no slot); cu_seqlens_q_output
//     [bsz + 1] int32; attr max_seq_len: legacy (FastDeploy [A] padded width), ignored
//   [ours] draft_tokens [N, D] int64, optional: row i of slot b also counts draft_tokens[b, 1..i]
// Per row t of slot b, local index i = t - cu_seqlens_q_output[b], in FastDeploy's order:
//   1. eos ids -> mask while cur_len[b] >= 0 and cur_len[b] + i < min_len[b];
//   2. for each distinct history id v with count c (cur_len[b] >= 0):
//      l = l < 0 ? l * alpha : l / alpha;  l = l - c * beta - gamma;
//   3. l = l / temperature[b] for the whole row;
//   4. bad_tokens[b, j < min(bad_tokens_len[b], W)] -> mask.
// mask = -1e10 (-1e4 for float16). Ids outside [0, V) in pre_ids, drafts, eos and bad tokens are
// skipped. Values that would index out of range raise here, before any row is written (a batch
// id >= bsz, a row outside its slot's [cu[b], cu[b+1]), cur_len[b] > S - 1, a row needing drafts
// past column D - 1), as does a temperature <= 0 and a prefix sum inconsistent with the rows
// (op_checks.h CheckOutputRows: cu_seqlens_q_output[0] != 0, a decreasing cu, T_out =
// cu_seqlens_q_output[bsz] > rows > 0, which would leave a slot's rows silently unpenalised); the
// CUDA kernel cannot raise without a host sync, so it bounds-checks instead (one block per
// logits row, so a slot's rows past the tensor do not exist and nothing past it is read; skips
// a row with an invalid batch id, clamps the history, treats temperature <= 0 as 1).
// float16/bfloat16 rows are computed in float and rounded once here; the CUDA kernel rounds
// between its phases.
#include <algorithm>
#include <cmath>
#include <vector>

#include "op_checks.h"

#ifdef SPECWORKER_WITH_CUDA
#include "speculate_get_token_penalty_multi_scores_cuda.h"
#endif

namespace {

constexpr const char* kOp = "speculate_get_token_penalty_multi_scores";
using paddle::DataType;

// A 1-D tensor [n] or FastDeploy's column [n, 1]; returns n.
int64_t CheckColumn(const char* name, const paddle::Tensor& x, DataType want) {
  specworker::CheckDtype(kOp, name, x, want);
  const auto& s = x.shape();
  PD_CHECK(s.size() == 1 || (s.size() == 2 && s[1] == 1), kOp, ": ", name, " has shape ",
           specworker::ShapeStr(s), ", expected a 1-D tensor [n] or [n, 1]");
  return s[0];
}

template <typename T>
void PenaltyCPU(const paddle::Tensor& pre_ids, paddle::Tensor& logits,
                const paddle::Tensor& penalty_scores, const paddle::Tensor& frequency_scores,
                const paddle::Tensor& presence_scores, const paddle::Tensor& temperatures,
                const paddle::Tensor& bad_tokens, const paddle::Tensor& bad_tokens_len,
                const paddle::Tensor& cur_len, const paddle::Tensor& min_len,
                const paddle::Tensor& eos_token_id, int64_t bsz,
                const paddle::Tensor& batch_id_per_token_output,
                const paddle::Tensor& cu_seqlens_q_output,
                const paddle::optional<paddle::Tensor>& draft_tokens, float mask) {
  const int64_t rows = logits.shape()[0], V = logits.shape()[1];
  const int64_t S = pre_ids.shape()[1], W = bad_tokens.shape()[1];
  const int64_t E = eos_token_id.shape()[0];
  const int64_t D = draft_tokens ? draft_tokens->shape()[1] : 0;
  const int64_t* hist = pre_ids.data<int64_t>();
  const int64_t* drafts = draft_tokens ? draft_tokens->data<int64_t>() : nullptr;
  const float* alpha = penalty_scores.data<float>();
  const float* beta = frequency_scores.data<float>();
  const float* gamma = presence_scores.data<float>();
  const float* temps = temperatures.data<float>();
  const int64_t* bad = bad_tokens.data<int64_t>();
  const int64_t* bad_len = bad_tokens_len.data<int64_t>();
  const int64_t* steps = cur_len.data<int64_t>();
  const int64_t* min_lens = min_len.data<int64_t>();
  const int64_t* eos = eos_token_id.data<int64_t>();
  const int32_t* batch_ids = batch_id_per_token_output.data<int32_t>();
  const int32_t* cu = cu_seqlens_q_output.data<int32_t>();
  T* out = logits.data<T>();

  // Every row is checked before any is written, so an error leaves logits untouched.
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t b = batch_ids[t];
    if (b < 0) continue;
    PD_CHECK(b < bsz, kOp, ": batch_id_per_token_output[", t, "] = ", b,
             ", expected -1 or a slot in [0, bsz = ", bsz, ")");
    PD_CHECK(cu[b] <= t && t < cu[b + 1], kOp, ": row ", t, " has slot ", b,
             " but cu_seqlens_q_output gives slot ", b, " the rows [", cu[b], ", ", cu[b + 1], ")");
    const int64_t i = t - cu[b];
    const int64_t step = steps[b];
    PD_CHECK(step <= S - 1, kOp, ": cur_len[", b, "] = ", step,
             " but pre_ids has positions up to S - 1 = ", S - 1,
             " (the history is pre_ids[b, 1 .. cur_len[b]])");
    PD_CHECK(!drafts || step < 0 || i <= D - 1, kOp, ": row ", t, " is draft position ", i,
             " of slot ", b, " and counts draft_tokens[", b, ", 1 .. ", i,
             "], but draft_tokens has only D = ", D, " columns");
    PD_CHECK(temps[b] > 0.f, kOp, ": temperatures[", b, "] = ", temps[b],
             ", expected > 0 (greedy rows take temperature 1)");
  }
  specworker::CheckOutputRows(kOp, "logits", rows, cu, bsz);

  std::vector<float> x(static_cast<size_t>(V));
  std::vector<int64_t> ids;
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t b = batch_ids[t];
    if (b < 0) continue;
    const int64_t i = t - cu[b];
    const int64_t step = steps[b];
    const float temp = temps[b];

    T* row = out + t * V;
    for (int64_t v = 0; v < V; ++v) x[v] = static_cast<float>(row[v]);
    if (step >= 0 && step + i < min_lens[b]) {
      for (int64_t e = 0; e < E; ++e) {
        if (eos[e] >= 0 && eos[e] < V) x[eos[e]] = mask;
      }
    }
    if (step >= 0) {
      ids.clear();
      for (int64_t j = 1; j <= step; ++j) ids.push_back(hist[b * S + j]);
      for (int64_t j = 1; drafts && j <= i; ++j) ids.push_back(drafts[b * D + j]);
      std::sort(ids.begin(), ids.end());
      for (size_t k = 0; k < ids.size();) {  // one run per distinct id
        size_t end = k;
        while (end < ids.size() && ids[end] == ids[k]) ++end;
        const int64_t v = ids[k];
        if (v >= 0 && v < V) {
          float l = x[v] < 0.f ? x[v] * alpha[b] : x[v] / alpha[b];
          x[v] = l - static_cast<float>(end - k) * beta[b] - gamma[b];
        }
        k = end;
      }
    }
    for (int64_t v = 0; v < V; ++v) x[v] = x[v] / temp;
    const int64_t nbad = std::min(bad_len[b], W);
    for (int64_t j = 0; j < nbad; ++j) {
      const int64_t v = bad[b * W + j];
      if (v >= 0 && v < V) x[v] = mask;
    }
    for (int64_t v = 0; v < V; ++v) row[v] = static_cast<T>(x[v]);
  }
}

}  // namespace

void SpeculateGetTokenPenaltyMultiScores(
    const paddle::Tensor& pre_ids, paddle::Tensor& logits, const paddle::Tensor& penalty_scores,
    const paddle::Tensor& frequency_scores, const paddle::Tensor& presence_scores,
    const paddle::Tensor& temperatures, const paddle::Tensor& bad_tokens,
    const paddle::Tensor& bad_tokens_len, const paddle::Tensor& cur_len,
    const paddle::Tensor& min_len, const paddle::Tensor& eos_token_id,
    const paddle::Tensor& seq_lens_this_time, const paddle::Tensor& batch_id_per_token_output,
    const paddle::Tensor& cu_seqlens_q_output, const paddle::optional<paddle::Tensor>& draft_tokens,
    int64_t max_seq_len) {
  specworker::CheckGiven(kOp, {{"pre_ids", &pre_ids}, {"logits", &logits},
                               {"penalty_scores", &penalty_scores},
                               {"frequency_scores", &frequency_scores},
                               {"presence_scores", &presence_scores},
                               {"temperatures", &temperatures}, {"bad_tokens", &bad_tokens},
                               {"bad_tokens_len", &bad_tokens_len}, {"cur_len", &cur_len},
                               {"min_len", &min_len}, {"eos_token_id", &eos_token_id},
                               {"seq_lens_this_time", &seq_lens_this_time},
                               {"batch_id_per_token_output", &batch_id_per_token_output},
                               {"cu_seqlens_q_output", &cu_seqlens_q_output}});
  (void)max_seq_len;  // legacy: FastDeploy [A]'s padded-output width; the row index needs no S
  using specworker::ShapeStr;
  const DataType dtype = logits.dtype();
  PD_CHECK(dtype == DataType::FLOAT32 || dtype == DataType::FLOAT16 ||
               dtype == DataType::BFLOAT16,
           kOp, ": logits has dtype ", specworker::DtypeStr(dtype),
           ", expected float32, float16 or bfloat16");
  specworker::CheckRank(kOp, "logits", logits, 2);
  const int64_t rows = logits.shape()[0], V = logits.shape()[1];
  PD_CHECK(V >= 1, kOp, ": logits has shape ", ShapeStr(logits.shape()), ", expected V >= 1");

  specworker::CheckDtype(kOp, "pre_ids", pre_ids, DataType::INT64);
  specworker::CheckRank(kOp, "pre_ids", pre_ids, 2);
  const int64_t N = pre_ids.shape()[0];
  PD_CHECK(pre_ids.shape()[1] >= 1, kOp, ": pre_ids has shape ", ShapeStr(pre_ids.shape()),
           ", expected [N, S] with S >= 1");
  specworker::CheckPerSlot(kOp, "penalty_scores", penalty_scores, DataType::FLOAT32, N);
  specworker::CheckPerSlot(kOp, "frequency_scores", frequency_scores, DataType::FLOAT32, N);
  specworker::CheckPerSlot(kOp, "presence_scores", presence_scores, DataType::FLOAT32, N);
  specworker::CheckPerSlot(kOp, "temperatures", temperatures, DataType::FLOAT32, N);
  specworker::CheckDtype(kOp, "bad_tokens", bad_tokens, DataType::INT64);
  specworker::CheckRank(kOp, "bad_tokens", bad_tokens, 2);
  PD_CHECK(bad_tokens.shape()[0] == N, kOp, ": bad_tokens has shape ",
           ShapeStr(bad_tokens.shape()), ", expected [N = ", N, ", W]");
  specworker::CheckPerSlot(kOp, "bad_tokens_len", bad_tokens_len, DataType::INT64, N);
  specworker::CheckPerSlot(kOp, "cur_len", cur_len, DataType::INT64, N);
  specworker::CheckPerSlot(kOp, "min_len", min_len, DataType::INT64, N);
  CheckColumn("eos_token_id", eos_token_id, DataType::INT64);
  const int64_t bsz =
      specworker::CheckPerSlot(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32);
  PD_CHECK(bsz <= N, kOp, ": seq_lens_this_time has ", bsz,
           " slots but the per-slot buffers (pre_ids) have N = ", N, " rows; expected bsz <= N");
  specworker::CheckDtype(kOp, "batch_id_per_token_output", batch_id_per_token_output,
                         DataType::INT32);
  specworker::CheckRank(kOp, "batch_id_per_token_output", batch_id_per_token_output, 1);
  PD_CHECK(batch_id_per_token_output.shape()[0] >= rows, kOp,
           ": batch_id_per_token_output has ", batch_id_per_token_output.shape()[0],
           " entries, expected at least one per logits row (", rows, ")");
  specworker::CheckDtype(kOp, "cu_seqlens_q_output", cu_seqlens_q_output, DataType::INT32);
  PD_CHECK(cu_seqlens_q_output.shape() == std::vector<int64_t>{bsz + 1}, kOp,
           ": cu_seqlens_q_output has shape ", ShapeStr(cu_seqlens_q_output.shape()),
           ", expected [bsz + 1] = [", bsz + 1, "]");
  if (draft_tokens) {
    specworker::CheckDtype(kOp, "draft_tokens", *draft_tokens, DataType::INT64);
    specworker::CheckRank(kOp, "draft_tokens", *draft_tokens, 2);
    PD_CHECK(draft_tokens->shape()[0] == N && draft_tokens->shape()[1] >= 1, kOp,
             ": draft_tokens has shape ", ShapeStr(draft_tokens->shape()),
             ", expected [N = ", N, ", D] with D >= 1");
  }
  const paddle::Tensor* all[] = {&pre_ids, &penalty_scores, &frequency_scores, &presence_scores,
                                 &temperatures, &bad_tokens, &bad_tokens_len, &cur_len, &min_len,
                                 &eos_token_id, &seq_lens_this_time, &batch_id_per_token_output,
                                 &cu_seqlens_q_output};
  const char* names[] = {"pre_ids", "penalty_scores", "frequency_scores", "presence_scores",
                         "temperatures", "bad_tokens", "bad_tokens_len", "cur_len", "min_len",
                         "eos_token_id", "seq_lens_this_time", "batch_id_per_token_output",
                         "cu_seqlens_q_output"};
  for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); ++k) {
    specworker::CheckSamePlace(kOp, names[k], *all[k], logits, "logits");
  }
  if (draft_tokens) specworker::CheckSamePlace(kOp, "draft_tokens", *draft_tokens, logits, "logits");

  if (logits.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    SpeculateGetTokenPenaltyMultiScoresCUDA(
        pre_ids, logits, penalty_scores, frequency_scores, presence_scores, temperatures,
        bad_tokens, bad_tokens_len, cur_len, min_len, eos_token_id, seq_lens_this_time,
        batch_id_per_token_output, cu_seqlens_q_output, draft_tokens);
    return;
#else
    PD_THROW(kOp, ": got a GPU tensor but the extension was built without CUDA");
#endif
  }
#define SPECWORKER_PENALTY_CPU(T, MASK)                                                        \
  PenaltyCPU<T>(pre_ids, logits, penalty_scores, frequency_scores, presence_scores,           \
                temperatures, bad_tokens, bad_tokens_len, cur_len, min_len, eos_token_id, bsz, \
                batch_id_per_token_output, cu_seqlens_q_output, draft_tokens, MASK)
  if (dtype == DataType::FLOAT32) {
    SPECWORKER_PENALTY_CPU(float, -1e10f);
  } else if (dtype == DataType::FLOAT16) {
    SPECWORKER_PENALTY_CPU(paddle::float16, -1e4f);
  } else {
    SPECWORKER_PENALTY_CPU(paddle::bfloat16, -1e10f);
  }
#undef SPECWORKER_PENALTY_CPU
}

PD_BUILD_OP(speculate_get_token_penalty_multi_scores)
    .Inputs({"pre_ids", "logits", "penalty_scores", "frequency_scores", "presence_scores",
             "temperatures", "bad_tokens", "bad_tokens_len", "cur_len", "min_len", "eos_token_id",
             "seq_lens_this_time", "batch_id_per_token_output", "cu_seqlens_q_output",
             paddle::Optional("draft_tokens")})
    .Outputs({"logits_out"})
    .Attrs({"max_seq_len: int64_t"})
    .SetInplaceMap({{"logits", "logits_out"}})
    .SetKernelFn(PD_KERNEL(SpeculateGetTokenPenaltyMultiScores));
