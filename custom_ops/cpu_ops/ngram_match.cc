// ngram_match: prompt-lookup drafts for every decoding slot (docs/spec.md "ngram_match"; FastDeploy
// era [B] custom_ops/gpu_ops/speculate_decoding/ngram_match.cc, its argument order). In place.
//   input_ids          [N, S_in] i64   the slot's whole prompt, [b, :input_ids_len[b]]
//   input_ids_len      [N] i64         prompt length P_b
//   pre_ids            [N, S] i64      generated token j (1-based) at [b, j], j = 1 .. step_idx[b]
//   step_idx           [N] i64         G_b, tokens generated so far
//   draft_token_num    [N] i32         adaptive draft budget (actual_draft_token_nums)
//   draft_tokens       [N, D] i64      in/out: columns 1 .. (column 0 is never touched)
//   seq_lens_this_time [bsz] i32       in/out: L_b
//   seq_lens_encoder, seq_lens_decoder [N] i32; max_dec_len [N] i64
//   is_block_step      [N] bool, optional [ours]
//   attrs: max_ngram_size, max_draft_tokens, min_ngram_size [ours, appended; default 1]
// Per-slot inputs are [n] or FastDeploy's [n, 1] with n >= bsz; row buffers have >= bsz rows.
//
// Per slot b < bsz:
//   E_b > 0              untouched (prefill; the host set L_b).
//   paused               L_b = 0 (only when is_block_step is given).
//   Dec_b == 0           L_b = 0 (stopped or empty).
//   decode               h = input_ids[b, :P] ++ pre_ids[b, 1 : G + 1], Lh = P + G,
//                        budget = min(draft_token_num, max_draft_tokens, D - 1,
//                                     max_dec_len - G - 1).
//                        For n = max_ngram_size .. min_ngram_size: the most recent start
//                        i <= Lh - n - 1 with h[i : i + n] == h[Lh - n : Lh] (overlap allowed);
//                        the first n that has one wins. m = min(budget, Lh - i - n) tokens
//                        h[i + n ..] go to draft_tokens[b, 1 ..], -1 after them; L_b = 1 + m.
//
// Differences from FastDeploy [B], on purpose (details in docs/spec.md):
//   - one history (prompt ++ generated): the suffix may span both and the most recent earlier
//     occurrence wins; FastDeploy takes the n-gram from generated tokens only, searches the
//     prompt first for its leftmost occurrence, then the generated tokens (from pre_ids column 0,
//     which holds no token) and stops one token short of the end.
//   - no cross-slot token threshold (FastDeploy: INFER_WITH_REFERENCE_TOKENUM_THRESHOLD, default
//     128, in slot order, which makes the op serial): our scheduler reserves D tokens per decode
//     slot, so slots are independent. No environment variable is read.
//   - drafts capped by draft_token_num, max_draft_tokens and D - 1 (FastDeploy ignores its
//     max_draft_tokens attribute and can write past D); columns after the drafts are set to -1.
//   - min_ngram_size and is_block_step appended; defaults give FastDeploy's behaviour.
//
// Bad values, CPU vs CUDA: the CPU kernel raises, before writing anything, on a decode slot whose
// input_ids_len is outside [0, S_in] or whose step_idx is outside [0, S - 1]. The CUDA kernel
// clamps them for the history instead (no host sync), so no access leaves the buffers.
#include <algorithm>

#include "ngram_checks.h"
#include "ngram_search.h"
#include "op_checks.h"

#ifdef SPECWORKER_WITH_CUDA
void NgramMatchCUDA(const paddle::Tensor& input_ids, const paddle::Tensor& input_ids_len,
                    const paddle::Tensor& pre_ids, const paddle::Tensor& step_idx,
                    const paddle::Tensor& draft_token_num, paddle::Tensor& draft_tokens,
                    paddle::Tensor& seq_lens_this_time, const paddle::Tensor& seq_lens_encoder,
                    const paddle::Tensor& seq_lens_decoder, const paddle::Tensor& max_dec_len,
                    const paddle::optional<paddle::Tensor>& is_block_step, int max_ngram_size,
                    int max_draft_tokens, int min_ngram_size);
#endif

namespace {

constexpr const char* kOp = "ngram_match";
using paddle::DataType;

void CheckArgs(const specworker::NgramInputs& in, const paddle::Tensor& seq_lens_encoder,
               const paddle::optional<paddle::Tensor>& is_block_step, int max_ngram_size,
               int max_draft_tokens, int min_ngram_size) {
  specworker::CheckGiven(kOp, {{"seq_lens_encoder", &seq_lens_encoder}});
  const int64_t bsz =
      specworker::CheckNgramInputs(kOp, in, max_ngram_size, min_ngram_size, max_draft_tokens).bsz;
  specworker::CheckNgramPerSlotInput(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32,
                                     in.seq_lens_this_time, bsz);
  if (is_block_step) {
    specworker::CheckNgramPerSlotInput(kOp, "is_block_step", *is_block_step, DataType::BOOL,
                                       in.seq_lens_this_time, bsz);
  }
}

// Raw views of the inputs; paused is nullptr when is_block_step is omitted.
struct Slots : specworker::NgramRows {
  const int32_t* enc;
  const bool* paused;

  bool IsDecode(int64_t b) const {
    return enc[b] <= 0 && !(paused != nullptr && paused[b]) && dec[b] != 0;
  }
  // Token x of slot b's history h = prompt ++ generated.
  int64_t Token(int64_t b, int64_t x) const {
    const int64_t p = prompt_len[b];
    return x < p ? prompt[b * S_in + x] : pre_ids[b * S + (x - p + 1)];
  }
};

void CheckHistoriesCPU(const Slots& s, int64_t bsz) {
  for (int64_t b = 0; b < bsz; ++b) {
    if (s.IsDecode(b)) specworker::CheckSlotHistory(kOp, b, s.prompt_len[b], s.S_in, s.step_idx[b], s.S);
  }
}

// Drafts of one decode slot: returns m and writes h[start .. start + m) to row[1 ..].
int64_t MatchSlot(const Slots& s, int64_t b, int64_t budget, int max_ngram_size,
                  int min_ngram_size) {
  if (budget <= 0) return 0;
  const int64_t length = s.prompt_len[b] + s.step_idx[b];
  const auto token = [&s, b](int64_t x) { return s.Token(b, x); };
  const int64_t start =
      specworker::NgramContinuationStart(token, length, max_ngram_size, min_ngram_size);
  if (start < 0) return 0;
  const int64_t m = std::min(budget, length - start);
  for (int64_t t = 0; t < m; ++t) s.drafts[b * s.D + 1 + t] = s.Token(b, start + t);
  return m;
}

void NgramMatchCPU(const Slots& s, int64_t bsz, int max_ngram_size, int max_draft_tokens,
                   int min_ngram_size) {
  CheckHistoriesCPU(s, bsz);
  for (int64_t b = 0; b < bsz; ++b) {
    if (s.enc[b] > 0) continue;
    if (!s.IsDecode(b)) {
      s.lens[b] = 0;
      continue;
    }
    const int64_t budget = specworker::NgramSlotBudget(s.budget[b], max_draft_tokens, s.D,
                                                       s.max_dec_len[b], s.step_idx[b]);
    const int64_t m = MatchSlot(s, b, budget, max_ngram_size, min_ngram_size);
    for (int64_t t = 1 + m; t < s.D; ++t) s.drafts[b * s.D + t] = -1;
    s.lens[b] = static_cast<int32_t>(1 + m);
  }
}

}  // namespace

void NgramMatch(const paddle::Tensor& input_ids, const paddle::Tensor& input_ids_len,
                const paddle::Tensor& pre_ids, const paddle::Tensor& step_idx,
                const paddle::Tensor& draft_token_num, paddle::Tensor& draft_tokens,
                paddle::Tensor& seq_lens_this_time, const paddle::Tensor& seq_lens_encoder,
                const paddle::Tensor& seq_lens_decoder, const paddle::Tensor& max_dec_len,
                const paddle::optional<paddle::Tensor>& is_block_step, int max_ngram_size,
                int max_draft_tokens, int min_ngram_size) {
  const specworker::NgramInputs in{input_ids,          input_ids_len,    pre_ids,
                                   step_idx,           draft_token_num,  draft_tokens,
                                   seq_lens_this_time, seq_lens_decoder, max_dec_len};
  CheckArgs(in, seq_lens_encoder, is_block_step, max_ngram_size, max_draft_tokens, min_ngram_size);
  if (seq_lens_this_time.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    NgramMatchCUDA(input_ids, input_ids_len, pre_ids, step_idx, draft_token_num, draft_tokens,
                   seq_lens_this_time, seq_lens_encoder, seq_lens_decoder, max_dec_len,
                   is_block_step, max_ngram_size, max_draft_tokens, min_ngram_size);
    return;
#else
    PD_THROW(kOp, ": got GPU tensors but the extension was built without CUDA");
#endif
  }
  const Slots s{specworker::NgramRowsOf(in), seq_lens_encoder.data<int32_t>(),
                is_block_step ? is_block_step->data<bool>() : nullptr};
  NgramMatchCPU(s, seq_lens_this_time.shape()[0], max_ngram_size, max_draft_tokens,
                min_ngram_size);
}

PD_BUILD_OP(ngram_match)
    .Inputs({"input_ids", "input_ids_len", "pre_ids", "step_idx", "draft_token_num",
             "draft_tokens", "seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder",
             "max_dec_len", paddle::Optional("is_block_step")})
    .Outputs({"draft_tokens_out", "seq_lens_this_time_out"})
    .Attrs({"max_ngram_size: int", "max_draft_tokens: int", "min_ngram_size: int"})
    .SetInplaceMap({{"draft_tokens", "draft_tokens_out"},
                    {"seq_lens_this_time", "seq_lens_this_time_out"}})
    .SetKernelFn(PD_KERNEL(NgramMatch));
