// speculate_verify: decides which draft tokens of one step are accepted and emits each slot's
// tokens (docs/spec.md §4.5; FastDeploy's op, era-[B] argument order, with [ours] inputs appended).
//
// Vocabulary: a *draft* is draft_tokens[b, i + 1]; it is *accepted* or *rejected* against output
// row s + i (s = cu_seqlens_q_output[b], i < L - 1, L = seq_lens_this_time[b]); the walk stops at
// the first rejection, whose row yields the *correction* token; when every draft passes, row
// s + L - 1 yields the *bonus* token. Emitted = accepted drafts + that one token.
//
// Per slot b < bsz:
//   * is_block_step or stop_flags set, L == 0: not verified; accept_num[b] = 0 ([ours]: FastDeploy
//     leaves a stale count), nothing else written.
//   * otherwise accept_tokens[b, :n] = emitted tokens, accept_tokens[b, n:] = -1, accept_num = n,
//     step_idx += n, stop_flags set when the slot stopped.
//   * prefill slots (seq_lens_encoder > 0, one output row), accept_policy reject_all (also
//     benchmark_mode) and reasoning_status 1 accept no draft; accept_all accepts every draft.
//   * each emitted token advances step_idx; an end token, or step_idx >= max_dec_len, stops the
//     slot and ends emission; a length stop on a non-end token writes end_tokens[0] instead.
// Strategies (verify_strategy, a string attr; the wrapper also takes FastDeploy's int values):
//   greedy       accept iff draft == verify_tokens[r, 0] (top-1); correction/bonus = top-1.
//   target_match accept iff draft == sampled_token_ids[r]; correction/bonus = sampled_token_ids[r].
//   topp         accept iff draft is among the first min(actual_candidate_len[r], C) candidates
//                (the top-p set); no entry past that length is ever read. Correction/bonus:
//                sampled from those candidates when enable_topp (inverse CDF, mass min(top_p,
//                candidate mass) [ours: FastDeploy gives the shortfall to candidate 0]), else
//                top-1. Lossy. verify_window has no effect (issue 16): FastDeploy's fallback
//                accepts a draft equal to the *second* candidate when the next verify_window
//                drafts match their rows' top-1; FastDeploy's top_p_candidates zero-fills past the
//                length, so that candidate is either inside the top-p set (already accepted by
//                the rule above) or no candidate at all. Restricted to the top-p set the fallback
//                can never change an outcome, so it is not implemented; a draft outside the set
//                is always rejected (FastDeploy's outcome for every draft id but 0).
//   rejection    [ours] Leviathan et al.: accept with prob min(1, p(x) / q(x)) (p = target_probs
//                row r, q = draft_probs[b, i], one-hot at the draft when absent; q(x) == 0
//                rejects); correction from norm(max(p - q, 0)), from p when that mass is 0;
//                bonus from p. A row with no mass at all emits id 0.
// Randomness: counter_rng.h, uniform(infer_seed[b] (slot index b when absent), step_idx + i, i,
// draw) with draw 0 = accept test, 1 = categorical draw; exact integer CDFs, so the CPU kernel,
// the CUDA kernel and the numpy reference agree bit for bit.
// Unused (accepted for FastDeploy compatibility): seq_lens_decoder, actual_draft_token_nums,
// max_seq_len, verify_window (checked >= 0). CPU raises on values that would index out of range
// (checked before anything is written); the CUDA kernel cannot, so it skips such a slot
// (accept_num 0) or rejects the draft.
#include <algorithm>
#include <string>
#include <vector>

#include "op_checks.h"
#include "kernels/counter_rng.h"
#include "kernels/speculate_verify.h"
#include "speculate_verify_checks.h"

#ifdef SPECWORKER_WITH_CUDA
#include "speculate_verify_cuda.h"
#endif

namespace {

using specworker::verify::kOp;
using specworker::verify::Sizes;

struct View {
  const int64_t* sampled;
  int64_t* accept_tokens;
  int32_t* accept_num;
  int64_t* step_idx;
  bool* stop_flags;
  const int32_t* encoder;
  const int64_t* draft;
  const int32_t* lens;
  const int64_t* cand_ids;
  const float* cand_scores;
  const int64_t* max_dec_len;
  const int64_t* end_tokens;
  const bool* block_step;
  const int32_t* cu_out;
  const int32_t* cand_len;
  const float* topp;
  const float* target_probs;
  const float* draft_probs;
  const int64_t* seed;
  const int32_t* reasoning;
  Sizes z;
  int strategy, policy;
  bool enable_topp;

  bool Verified(int64_t b) const {
    return !block_step[b] && !stop_flags[b] && lens[b] > 0;
  }
  bool Prefill(int64_t b) const { return encoder[b] > 0; }
  bool WalksDrafts(int64_t b) const {
    return !Prefill(b) && policy != SPECWORKER_REJECT_ALL && !(reasoning && reasoning[b] == 1);
  }
  const int64_t* Cands(int64_t r) const { return cand_ids + r * z.C; }
  int NumCands(int64_t r) const {
    return static_cast<int>(std::min<int64_t>(std::max(cand_len[r], 0), z.C));
  }
};

// Everything the kernel will index is in range; raises before any output is written.
void CheckIndices(const View& v) {
  for (int64_t b = 0; b < v.z.B; ++b) {
    if (!v.Verified(b)) continue;
    const int64_t L = v.lens[b];
    PD_CHECK(v.Prefill(b) || L <= v.z.D, kOp, ": seq_lens_this_time[", b, "] = ", L,
             " on a decode slot, expected <= max_draft_tokens = ", v.z.D);
    const int64_t used = v.Prefill(b) ? 1 : L;
    const int64_t s = v.cu_out[b];
    PD_CHECK(s >= 0 && s + used <= v.z.rows, kOp, ": slot ", b, " reads output rows [", s, ", ",
             s + used, ") (cu_seqlens_q_output[", b, "] = ", s, ", ", used,
             " rows), expected within [0, rows = ", v.z.rows, ")");
    const bool reads_probs = v.strategy == SPECWORKER_VERIFY_REJECTION &&
                             v.policy == SPECWORKER_ACCEPT_NORMAL && v.WalksDrafts(b);
    for (int64_t i = 1; reads_probs && i < L; ++i) {
      const int64_t x = v.draft[b * v.z.D + i];
      PD_CHECK(x >= 0 && x < v.z.V, kOp, ": draft_tokens[", b, ", ", i, "] = ", x,
               ", expected a token id in [0, V = ", v.z.V, ") for rejection sampling");
    }
  }
}

struct Emitter {
  int64_t* out;
  int64_t n;
  int64_t step;
  int64_t max_dec;
  bool stopped;
  const View* v;

  bool Emit(int64_t tok) {
    ++step;
    const bool eos = std::find(v->end_tokens, v->end_tokens + v->z.E, tok) != v->end_tokens + v->z.E;
    if (eos || step >= max_dec) {
      stopped = true;
      if (!eos && v->z.E > 0) tok = v->end_tokens[0];
    }
    out[n++] = tok;
    return stopped;
  }
};

int64_t SampleCandidates(const View& v, int64_t r, float top_p, uint32_t bits) {
  using namespace specworker::rng;
  const int64_t* ids = v.Cands(r);
  const float* scores = v.cand_scores + r * v.z.C;
  const int n = v.NumCands(r);
  uint64_t mass = 0;
  for (int m = 0; m < n; ++m) mass += ProbUnits(scores[m]);
  const uint64_t cap = std::min(ProbUnits(top_p), mass);
  if (cap == 0) return ids[0];
  const uint64_t t = ScaleToMass(bits, cap);
  uint64_t cum = 0;
  for (int m = 0; m < n; ++m) {
    cum += ProbUnits(scores[m]);
    if (cum > t) return ids[m];
  }
  return ids[0];  // unreachable: t < cap <= mass
}

// Inverse-CDF draw over V from p (or from max(p - q, 0) when residual and that has mass).
int64_t SampleVocab(const View& v, int64_t r, bool residual, const float* q, int64_t draft,
                    uint32_t bits) {
  using namespace specworker::rng;
  const float* p = v.target_probs + r * v.z.V;
  const int64_t V = v.z.V;
  auto weight = [&](int64_t id, bool use_residual) -> uint64_t {
    const uint64_t pu = ProbUnits(p[id]);
    if (!use_residual) return pu;
    const uint64_t qu = q ? ProbUnits(q[id]) : (id == draft ? kProbOne : 0);
    return pu > qu ? pu - qu : 0;
  };
  uint64_t total_r = 0, total_p = 0;
  for (int64_t id = 0; id < V; ++id) {
    total_p += weight(id, false);
    if (residual) total_r += weight(id, true);
  }
  const bool use_r = total_r > 0;
  const uint64_t total = use_r ? total_r : total_p;
  if (total == 0) return 0;
  const uint64_t t = ScaleToMass(bits, total);
  uint64_t cum = 0;
  for (int64_t id = 0; id < V; ++id) {
    cum += weight(id, use_r);
    if (cum > t) return id;
  }
  return V - 1;  // unreachable: t < total
}

void VerifySlot(const View& v, int64_t b) {
  using namespace specworker::rng;
  const int64_t D = v.z.D;
  const int64_t s = v.cu_out[b];
  const int64_t L = v.lens[b];
  const int64_t* dr = v.draft + b * D;
  const int64_t step0 = v.step_idx[b];
  const int64_t seed = v.seed ? v.seed[b] : b;
  Emitter em{v.accept_tokens + b * D, 0, step0, v.max_dec_len[b], false, &v};
  int64_t i = 0;
  bool rejected = false;
  while (v.WalksDrafts(b) && i < L - 1) {
    const int64_t x = dr[i + 1];
    const int64_t r = s + i;
    bool ok = v.policy == SPECWORKER_ACCEPT_ALL;
    if (!ok && v.strategy == SPECWORKER_VERIFY_GREEDY) {
      ok = v.Cands(r)[0] == x;
    } else if (!ok && v.strategy == SPECWORKER_VERIFY_TARGET_MATCH) {
      ok = v.sampled[r] == x;
    } else if (!ok && v.strategy == SPECWORKER_VERIFY_TOPP) {
      ok = std::find(v.Cands(r), v.Cands(r) + v.NumCands(r), x) != v.Cands(r) + v.NumCands(r);
    } else if (!ok) {  // rejection
      const float p = v.target_probs[r * v.z.V + x];
      const float q = v.draft_probs ? v.draft_probs[((b * (D - 1)) + i) * v.z.V + x] : 1.0f;
      ok = AcceptDraft(CounterBits(seed, step0 + i, static_cast<uint32_t>(i), 0), p, q);
      rejected = !ok;
    }
    if (!ok || em.Emit(x)) break;
    ++i;
  }
  if (!em.stopped) {
    const int64_t r = s + i;
    const uint32_t bits = CounterBits(seed, step0 + i, static_cast<uint32_t>(i), 1);
    int64_t tok;
    if (v.strategy == SPECWORKER_VERIFY_TARGET_MATCH) {
      tok = v.sampled[r];
    } else if (v.strategy == SPECWORKER_VERIFY_REJECTION) {
      const float* q = (rejected && v.draft_probs) ? v.draft_probs + (b * (D - 1) + i) * v.z.V : nullptr;
      tok = SampleVocab(v, r, rejected, q, rejected ? dr[i + 1] : -1, bits);
    } else if (v.strategy == SPECWORKER_VERIFY_TOPP && v.enable_topp) {
      tok = SampleCandidates(v, r, v.topp[b], bits);
    } else {
      tok = v.Cands(r)[0];
    }
    em.Emit(tok);
  }
  std::fill(em.out + em.n, em.out + D, -1);
  v.accept_num[b] = static_cast<int32_t>(em.n);
  v.step_idx[b] = em.step;
  if (em.stopped) v.stop_flags[b] = true;
}

template <typename T>
const T* OptData(const paddle::optional<paddle::Tensor>& t) {
  return t ? t->data<T>() : nullptr;
}

}  // namespace

void SpeculateVerify(const paddle::Tensor& sampled_token_ids, paddle::Tensor& accept_tokens,
                     paddle::Tensor& accept_num, paddle::Tensor& step_idx,
                     paddle::Tensor& stop_flags, const paddle::Tensor& seq_lens_encoder,
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
                     const paddle::optional<paddle::Tensor>& reasoning_status, int max_seq_len,
                     int verify_window, bool enable_topp, bool benchmark_mode,
                     bool accept_all_drafts, const std::string& verify_strategy,
                     const std::string& accept_policy) {
  specworker::CheckGiven(kOp, {{"sampled_token_ids", &sampled_token_ids},
                               {"accept_tokens", &accept_tokens}, {"accept_num", &accept_num},
                               {"step_idx", &step_idx}, {"stop_flags", &stop_flags},
                               {"seq_lens_encoder", &seq_lens_encoder},
                               {"seq_lens_decoder", &seq_lens_decoder},
                               {"draft_tokens", &draft_tokens},
                               {"seq_lens_this_time", &seq_lens_this_time},
                               {"verify_tokens", &verify_tokens}, {"verify_scores", &verify_scores},
                               {"max_dec_len", &max_dec_len}, {"end_tokens", &end_tokens},
                               {"is_block_step", &is_block_step},
                               {"cu_seqlens_q_output", &cu_seqlens_q_output},
                               {"actual_candidate_len", &actual_candidate_len},
                               {"actual_draft_token_nums", &actual_draft_token_nums},
                               {"topp", &topp}});
  (void)max_seq_len;  // FastDeploy's legacy attribute; rows come from cu_seqlens_q_output
  const int strategy = specworker::verify::ParseStrategy(verify_strategy);
  const int policy =
      specworker::verify::ResolvePolicy(accept_policy, benchmark_mode, accept_all_drafts);
  const Sizes z = specworker::verify::CheckInputs(
      sampled_token_ids, accept_tokens, accept_num, step_idx, stop_flags, seq_lens_encoder,
      seq_lens_decoder, draft_tokens, seq_lens_this_time, verify_tokens, verify_scores,
      max_dec_len, end_tokens, is_block_step, cu_seqlens_q_output, actual_candidate_len,
      actual_draft_token_nums, topp, target_probs, draft_probs, infer_seed, reasoning_status,
      verify_strategy, strategy, verify_window);
  if (accept_tokens.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    SpeculateVerifyCUDA(sampled_token_ids, accept_tokens, accept_num, step_idx, stop_flags,
                        seq_lens_encoder, draft_tokens, seq_lens_this_time, verify_tokens,
                        verify_scores, max_dec_len, end_tokens, is_block_step,
                        cu_seqlens_q_output, actual_candidate_len, topp, target_probs,
                        draft_probs, infer_seed, reasoning_status, verify_window, strategy,
                        policy, enable_topp);
    return;
#else
    PD_THROW(kOp, ": got GPU tensors but the extension was built without CUDA");
#endif
  }
  const View v{sampled_token_ids.data<int64_t>(), accept_tokens.data<int64_t>(),
               accept_num.data<int32_t>(), step_idx.data<int64_t>(), stop_flags.data<bool>(),
               seq_lens_encoder.data<int32_t>(), draft_tokens.data<int64_t>(),
               seq_lens_this_time.data<int32_t>(), verify_tokens.data<int64_t>(),
               verify_scores.data<float>(), max_dec_len.data<int64_t>(),
               end_tokens.data<int64_t>(), is_block_step.data<bool>(),
               cu_seqlens_q_output.data<int32_t>(), actual_candidate_len.data<int32_t>(),
               topp.data<float>(), OptData<float>(target_probs), OptData<float>(draft_probs),
               OptData<int64_t>(infer_seed), OptData<int32_t>(reasoning_status), z, strategy,
               policy, enable_topp};
  CheckIndices(v);
  for (int64_t b = 0; b < z.B; ++b) {
    if (v.Verified(b)) {
      VerifySlot(v, b);
    } else {
      v.accept_num[b] = 0;
    }
  }
}

PD_BUILD_OP(speculate_verify)
    .Inputs({"sampled_token_ids", "accept_tokens", "accept_num", "step_idx", "stop_flags",
             "seq_lens_encoder", "seq_lens_decoder", "draft_tokens", "seq_lens_this_time",
             "verify_tokens", "verify_scores", "max_dec_len", "end_tokens", "is_block_step",
             "cu_seqlens_q_output", "actual_candidate_len", "actual_draft_token_nums", "topp",
             paddle::Optional("target_probs"), paddle::Optional("draft_probs"),
             paddle::Optional("infer_seed"), paddle::Optional("reasoning_status")})
    .Outputs({"accept_tokens_out", "accept_num_out", "step_idx_out", "stop_flags_out"})
    .Attrs({"max_seq_len: int", "verify_window: int", "enable_topp: bool", "benchmark_mode: bool",
            "accept_all_drafts: bool", "verify_strategy: std::string",
            "accept_policy: std::string"})
    .SetInplaceMap({{"accept_tokens", "accept_tokens_out"},
                    {"accept_num", "accept_num_out"},
                    {"step_idx", "step_idx_out"},
                    {"stop_flags", "stop_flags_out"}})
    .SetKernelFn(PD_KERNEL(SpeculateVerify));
