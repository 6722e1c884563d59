// Argument checks of speculate_verify (shapes, dtypes, places, optional-input rules, modes); the
// op runs them before dispatching to the CPU or the CUDA kernel. Included by
// cpu_ops/speculate_verify.cc only.
#pragma once

#include <string>
#include <vector>

#include "op_checks.h"
#include "kernels/counter_rng.h"
#include "kernels/speculate_verify.h"

namespace specworker {
namespace verify {

constexpr const char* kOp = "speculate_verify";

inline int ParseStrategy(const std::string& s) {
  if (s == "topp") return SPECWORKER_VERIFY_TOPP;
  if (s == "greedy") return SPECWORKER_VERIFY_GREEDY;
  if (s == "target_match") return SPECWORKER_VERIFY_TARGET_MATCH;
  if (s == "rejection") return SPECWORKER_VERIFY_REJECTION;
  PD_THROW(kOp, ": verify_strategy = '", s,
           "', expected one of 'topp', 'greedy', 'target_match', 'rejection'");
}

// reject_all (or benchmark_mode) wins over accept_all (or accept_all_drafts), as in FastDeploy.
inline int ResolvePolicy(const std::string& s, bool benchmark_mode, bool accept_all_drafts) {
  PD_CHECK(s == "normal" || s == "accept_all" || s == "reject_all", kOp, ": accept_policy = '", s,
           "', expected one of 'normal', 'accept_all', 'reject_all'");
  if (s == "reject_all" || benchmark_mode) return SPECWORKER_REJECT_ALL;
  if (s == "accept_all" || accept_all_drafts) return SPECWORKER_ACCEPT_ALL;
  return SPECWORKER_ACCEPT_NORMAL;
}

inline void CheckShape(const char* name, const paddle::Tensor& x, paddle::DataType dtype,
                const std::vector<int64_t>& want, const char* what) {
  specworker::CheckDtype(kOp, name, x, dtype);
  PD_CHECK(x.shape() == want, kOp, ": ", name, " has shape ", specworker::ShapeStr(x.shape()), ", expected ",
           what, " = ", specworker::ShapeStr(want));
}

// A per-row vector: [rows] or FastDeploy's [rows, 1].
inline void CheckPerRow(const char* name, const paddle::Tensor& x, paddle::DataType dtype, int64_t rows) {
  specworker::CheckDtype(kOp, name, x, dtype);
  const auto& s = x.shape();
  const bool ok = (s.size() == 1 || (s.size() == 2 && s[1] == 1)) && s[0] == rows;
  PD_CHECK(ok, kOp, ": ", name, " has shape ", specworker::ShapeStr(s), ", expected [rows] or [rows, 1] with rows",
           " = sampled_token_ids.shape[0] = ", rows);
}

struct Sizes {
  int64_t N, B, D, rows, C, V, E;
};

inline Sizes CheckInputs(const paddle::Tensor& sampled_token_ids, const paddle::Tensor& accept_tokens,
                  const paddle::Tensor& accept_num, const paddle::Tensor& step_idx,
                  const paddle::Tensor& stop_flags, const paddle::Tensor& seq_lens_encoder,
                  const paddle::Tensor& seq_lens_decoder, const paddle::Tensor& draft_tokens,
                  const paddle::Tensor& seq_lens_this_time, const paddle::Tensor& verify_tokens,
                  const paddle::Tensor& verify_scores, const paddle::Tensor& max_dec_len,
                  const paddle::Tensor& end_tokens, const paddle::Tensor& is_block_step,
                  const paddle::Tensor& cu_seqlens_q_output,
                  const paddle::Tensor& actual_candidate_len,
                  const paddle::Tensor& actual_draft_token_nums, const paddle::Tensor& topp,
                  const paddle::optional<paddle::Tensor>& target_probs,
                  const paddle::optional<paddle::Tensor>& draft_probs,
                  const paddle::optional<paddle::Tensor>& infer_seed,
                  const paddle::optional<paddle::Tensor>& reasoning_status,
                  const std::string& strategy_name, int strategy, int verify_window) {
  using paddle::DataType;
  using specworker::CheckPerSlot;
  Sizes z{};
  specworker::CheckDtype(kOp, "accept_tokens", accept_tokens, DataType::INT64);
  specworker::CheckRank(kOp, "accept_tokens", accept_tokens, 2);
  z.N = accept_tokens.shape()[0];
  z.D = accept_tokens.shape()[1];
  PD_CHECK(z.D >= 1, kOp, ": accept_tokens has shape ", specworker::ShapeStr(accept_tokens.shape()),
           ", expected [max_num_seqs, max_draft_tokens] with max_draft_tokens >= 1");
  CheckShape("draft_tokens", draft_tokens, DataType::INT64, {z.N, z.D},
             "[max_num_seqs, max_draft_tokens] (accept_tokens' shape)");
  CheckPerSlot(kOp, "accept_num", accept_num, DataType::INT32, z.N);
  CheckPerSlot(kOp, "step_idx", step_idx, DataType::INT64, z.N);
  CheckPerSlot(kOp, "stop_flags", stop_flags, DataType::BOOL, z.N);
  CheckPerSlot(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, z.N);
  CheckPerSlot(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, z.N);
  CheckPerSlot(kOp, "max_dec_len", max_dec_len, DataType::INT64, z.N);
  CheckPerSlot(kOp, "is_block_step", is_block_step, DataType::BOOL, z.N);
  CheckPerSlot(kOp, "actual_draft_token_nums", actual_draft_token_nums, DataType::INT32, z.N);
  CheckPerSlot(kOp, "topp", topp, DataType::FLOAT32, z.N);
  z.B = CheckPerSlot(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32);
  PD_CHECK(z.B <= z.N, kOp, ": seq_lens_this_time has ", z.B,
           " slots, expected bsz <= max_num_seqs = ", z.N, " (accept_tokens.shape[0])");
  CheckShape("cu_seqlens_q_output", cu_seqlens_q_output, DataType::INT32, {z.B + 1}, "[bsz + 1]");
  specworker::CheckDtype(kOp, "sampled_token_ids", sampled_token_ids, DataType::INT64);
  const auto& ss = sampled_token_ids.shape();
  PD_CHECK(ss.size() == 1 || (ss.size() == 2 && ss[1] == 1), kOp, ": sampled_token_ids has shape ",
           specworker::ShapeStr(ss), ", expected [rows] or [rows, 1]");
  z.rows = ss[0];
  specworker::CheckDtype(kOp, "verify_tokens", verify_tokens, DataType::INT64);
  specworker::CheckRank(kOp, "verify_tokens", verify_tokens, 2);
  z.C = verify_tokens.shape()[1];
  CheckShape("verify_tokens", verify_tokens, DataType::INT64, {z.rows, z.C},
             "[rows, max_candidate_len] with rows = sampled_token_ids.shape[0]");
  CheckShape("verify_scores", verify_scores, DataType::FLOAT32, {z.rows, z.C},
             "[rows, max_candidate_len] (verify_tokens' shape)");
  CheckPerRow("actual_candidate_len", actual_candidate_len, DataType::INT32, z.rows);
  specworker::CheckDtype(kOp, "end_tokens", end_tokens, DataType::INT64);
  specworker::CheckRank(kOp, "end_tokens", end_tokens, 1);
  z.E = end_tokens.shape()[0];
  if (strategy == SPECWORKER_VERIFY_GREEDY || strategy == SPECWORKER_VERIFY_TOPP) {
    PD_CHECK(z.C >= 1, kOp, ": verify_tokens has shape ", specworker::ShapeStr(verify_tokens.shape()),
             "; greedy and topp read candidate 0, expected max_candidate_len >= 1");
  }
  PD_CHECK(verify_window >= 0, kOp, ": verify_window = ", verify_window, ", expected >= 0");

  const bool rejection = strategy == SPECWORKER_VERIFY_REJECTION;
  PD_CHECK(!draft_probs || target_probs, kOp,
           ": draft_probs was given without target_probs; rejection sampling needs both "
           "(or target_probs alone for one-hot drafts)");
  PD_CHECK(rejection == target_probs.is_initialized(), kOp, ": verify_strategy '", strategy_name,
           "' ",
           rejection ? "needs target_probs [rows, V] float32 (got None)"
                     : "does not read target_probs/draft_probs; pass them only with 'rejection'");
  z.V = 0;
  if (target_probs) {
    specworker::CheckDtype(kOp, "target_probs", *target_probs, DataType::FLOAT32);
    specworker::CheckRank(kOp, "target_probs", *target_probs, 2);
    z.V = target_probs->shape()[1];
    CheckShape("target_probs", *target_probs, DataType::FLOAT32, {z.rows, z.V},
               "[rows, V] with rows = sampled_token_ids.shape[0]");
    PD_CHECK(z.V >= 1 && z.V <= specworker::rng::kMaxCdfEntries, kOp, ": target_probs has V = ",
             z.V, ", expected 1 <= V <= 2^24");
  }
  if (draft_probs) {
    CheckShape("draft_probs", *draft_probs, DataType::FLOAT32, {z.N, z.D - 1, z.V},
               "[max_num_seqs, max_draft_tokens - 1, V]");
  }
  if (infer_seed) CheckPerSlot(kOp, "infer_seed", *infer_seed, DataType::INT64, z.N);
  if (reasoning_status) {
    CheckPerSlot(kOp, "reasoning_status", *reasoning_status, DataType::INT32, z.N);
  }
  PD_CHECK(z.rows <= INT32_MAX && z.N <= INT32_MAX, kOp, ": ", z.rows, " rows / ", z.N,
           " slots exceed the int32 index range");
  const paddle::Tensor* all[] = {&sampled_token_ids, &accept_num, &step_idx, &stop_flags,
                                 &seq_lens_encoder, &seq_lens_decoder, &draft_tokens,
                                 &seq_lens_this_time, &verify_tokens, &verify_scores,
                                 &max_dec_len, &end_tokens, &is_block_step, &cu_seqlens_q_output,
                                 &actual_candidate_len, &actual_draft_token_nums, &topp};
  for (const paddle::Tensor* t : all) {
    specworker::CheckSamePlace(kOp, "every input", *t, accept_tokens, "accept_tokens");
  }
  for (const auto* t : {&target_probs, &draft_probs, &infer_seed, &reasoning_status}) {
    if (*t) specworker::CheckSamePlace(kOp, "every optional input", **t, accept_tokens, "accept_tokens");
  }
  return z;
}

}  // namespace verify
}  // namespace specworker
