// hybrid_mtp_ngram: n-gram drafts that extend the MTP drafts of every decoding slot (docs/spec.md
// §5.8; FastDeploy's custom_ops/gpu_ops/speculate_decoding/draft_model/ngram_match_mixed.cu, its
// argument order). Runs after draft_model_postprocess. In place.
//   input_ids          [N, S_in] i64   the slot's whole prompt, [b, :input_ids_len[b]]
//   input_ids_len      [N] i64         prompt length P_b
//   pre_ids            [N, S] i64      generated token j (1-based) at [b, j], j = 1 .. step_idx[b]
//   step_idx           [N] i64         G_b, tokens generated so far
//   draft_token_num    [N] i32         adaptive draft budget (actual_draft_token_nums)
//   draft_tokens       [N, D] i64      in/out: MTP drafts in columns 1 .. num_model_steps
//   seq_lens_this_time [bsz] i32       in/out: L_b = 1 + MTP drafts on entry
//   seq_lens_decoder   [N] i32; max_dec_len [N] i64
//   seq_lens_encoder   [N] i32, optional [ours]
//   attrs: max_ngram_size, min_ngram_size, max_draft_tokens, num_model_steps [ours, appended]
// Per-slot inputs are [n] or FastDeploy's [n, 1] with n >= bsz; row buffers have >= bsz rows.
//
// Per slot b < bsz, with s = num_model_steps:
//   extended only when E_b <= 0 (or seq_lens_encoder omitted), Dec_b != 0 and L_b == 1 + s (the
//   MTP chain is complete); every other slot is left untouched.
//   extended             h = input_ids[b, :P] ++ pre_ids[b, 1 : G + 1] ++ draft_tokens[b, 1 : 1 + s],
//                        Lh = P + G + s, budget = min(draft_token_num, max_draft_tokens, D - 1,
//                        max_dec_len - G - 1) drafts in all. When budget > s: the continuation of
//                        the most recent earlier occurrence of the longest suffix of h (ngram_match's
//                        search) gives m = min(budget - s, Lh - start) tokens -> draft_tokens[b, 1 + s ..];
//                        else m = 0. Then -1 after the drafts, L_b = 1 + s + m. MTP drafts are never
//                        changed, even when budget < s.
//
// Differences from FastDeploy, on purpose (details in docs/spec.md §5.8): one history (prompt ++
// generated ++ MTP drafts) with the most recent occurrence, as ngram_match; only complete MTP chains
// are extended (FastDeploy extends every slot with L > 0, prefill rows included); draft_token_num and
// D cap the drafts; no cross-slot SPEC_TOKENUM_THRESHOLD; one launch on CUDA.
//
// Bad values, CPU vs CUDA: the CPU kernel raises, before writing anything, on an extended slot whose
// input_ids_len is outside [0, S_in] or whose step_idx is outside [0, S - 1]. The CUDA kernel clamps
// them for the history instead (no host sync).
#include <algorithm>

#include "ngram_checks.h"
#include "ngram_search.h"
#include "op_checks.h"

#ifdef SPECWORKER_WITH_CUDA
void HybridMtpNgramCUDA(const paddle::Tensor& input_ids, const paddle::Tensor& input_ids_len,
                        const paddle::Tensor& pre_ids, const paddle::Tensor& step_idx,
                        const paddle::Tensor& draft_token_num, paddle::Tensor& draft_tokens,
                        paddle::Tensor& seq_lens_this_time, const paddle::Tensor& seq_lens_decoder,
                        const paddle::Tensor& max_dec_len,
                        const paddle::optional<paddle::Tensor>& seq_lens_encoder,
                        int max_ngram_size, int min_ngram_size, int max_draft_tokens,
                        int num_model_steps);
#endif

namespace {

constexpr const char* kOp = "hybrid_mtp_ngram";

void CheckArgs(const specworker::NgramInputs& in,
               const paddle::optional<paddle::Tensor>& seq_lens_encoder, int max_ngram_size,
               int min_ngram_size, int max_draft_tokens, int num_model_steps) {
  const auto [bsz, D] =
      specworker::CheckNgramInputs(kOp, in, max_ngram_size, min_ngram_size, max_draft_tokens);
  if (seq_lens_encoder) {
    specworker::CheckNgramPerSlotInput(kOp, "seq_lens_encoder", *seq_lens_encoder,
                                       paddle::DataType::INT32, in.seq_lens_this_time, bsz);
  }
  PD_CHECK(0 <= num_model_steps && num_model_steps <= D - 1, kOp, ": num_model_steps = ",
           num_model_steps, ", expected 0 <= num_model_steps <= D - 1 = ", D - 1,
           " (the MTP drafts sit in draft_tokens columns 1 .. num_model_steps)");
}

// Raw views of the inputs; enc is nullptr when seq_lens_encoder is omitted.
struct Slots : specworker::NgramRows {
  const int32_t* enc;
  int num_model_steps;

  bool Extends(int64_t b) const {
    return !(enc != nullptr && enc[b] > 0) && dec[b] != 0 && lens[b] == 1 + num_model_steps;
  }
  // Token x of slot b's history h = prompt ++ generated ++ MTP drafts.
  int64_t Token(int64_t b, int64_t x) const {
    const int64_t p = prompt_len[b], g = step_idx[b];
    if (x < p) return prompt[b * S_in + x];
    if (x < p + g) return pre_ids[b * S + (x - p + 1)];
    return drafts[b * D + (x - p - g + 1)];
  }
};

void CheckHistoriesCPU(const Slots& s, int64_t bsz) {
  for (int64_t b = 0; b < bsz; ++b) {
    if (s.Extends(b)) specworker::CheckSlotHistory(kOp, b, s.prompt_len[b], s.S_in, s.step_idx[b], s.S);
  }
}

// n-gram tokens appended after the s MTP drafts of slot b: returns m, writes row[1 + s ..].
int64_t ExtendSlot(const Slots& s, int64_t b, int64_t extra, int max_ngram_size,
                   int min_ngram_size) {
  if (extra <= 0) return 0;
  const int64_t length = s.prompt_len[b] + s.step_idx[b] + s.num_model_steps;
  const auto token = [&s, b](int64_t x) { return s.Token(b, x); };
  const int64_t start =
      specworker::NgramContinuationStart(token, length, max_ngram_size, min_ngram_size);
  if (start < 0) return 0;
  const int64_t m = std::min(extra, length - start);
  // start + t < length: the tokens read are columns <= s of the row, those written are > s.
  for (int64_t t = 0; t < m; ++t) {
    s.drafts[b * s.D + 1 + s.num_model_steps + t] = s.Token(b, start + t);
  }
  return m;
}

void HybridMtpNgramCPU(const Slots& s, int64_t bsz, int max_ngram_size, int min_ngram_size,
                       int max_draft_tokens) {
  CheckHistoriesCPU(s, bsz);
  for (int64_t b = 0; b < bsz; ++b) {
    if (!s.Extends(b)) continue;
    const int64_t budget = specworker::NgramSlotBudget(s.budget[b], max_draft_tokens, s.D,
                                                       s.max_dec_len[b], s.step_idx[b]);
    const int64_t m =
        ExtendSlot(s, b, budget - s.num_model_steps, max_ngram_size, min_ngram_size);
    const int64_t drafted = s.num_model_steps + m;
    for (int64_t t = 1 + drafted; t < s.D; ++t) s.drafts[b * s.D + t] = -1;
    s.lens[b] = static_cast<int32_t>(1 + drafted);
  }
}

}  // namespace

void HybridMtpNgram(const paddle::Tensor& input_ids, const paddle::Tensor& input_ids_len,
                    const paddle::Tensor& pre_ids, const paddle::Tensor& step_idx,
                    const paddle::Tensor& draft_token_num, paddle::Tensor& draft_tokens,
                    paddle::Tensor& seq_lens_this_time, const paddle::Tensor& seq_lens_decoder,
                    const paddle::Tensor& max_dec_len,
                    const paddle::optional<paddle::Tensor>& seq_lens_encoder, int max_ngram_size,
                    int min_ngram_size, int max_draft_tokens, int num_model_steps) {
  const specworker::NgramInputs in{input_ids,          input_ids_len,    pre_ids,
                                   step_idx,           draft_token_num,  draft_tokens,
                                   seq_lens_this_time, seq_lens_decoder, max_dec_len};
  CheckArgs(in, seq_lens_encoder, max_ngram_size, min_ngram_size, max_draft_tokens, num_model_steps);
  if (seq_lens_this_time.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    HybridMtpNgramCUDA(input_ids, input_ids_len, pre_ids, step_idx, draft_token_num, draft_tokens,
                       seq_lens_this_time, seq_lens_decoder, max_dec_len, seq_lens_encoder,
                       max_ngram_size, min_ngram_size, max_draft_tokens, num_model_steps);
    return;
#else
    PD_THROW(kOp, ": got GPU tensors but the extension was built without CUDA");
#endif
  }
  const Slots s{specworker::NgramRowsOf(in),
                seq_lens_encoder ? seq_lens_encoder->data<int32_t>() : nullptr, num_model_steps};
  HybridMtpNgramCPU(s, seq_lens_this_time.shape()[0], max_ngram_size, min_ngram_size,
                    max_draft_tokens);
}

PD_BUILD_OP(hybrid_mtp_ngram)
    .Inputs({"input_ids", "input_ids_len", "pre_ids", "step_idx", "draft_token_num",
             "draft_tokens", "seq_lens_this_time", "seq_lens_decoder", "max_dec_len",
             paddle::Optional("seq_lens_encoder")})
    .Outputs({"draft_tokens_out", "seq_lens_this_time_out"})
    .Attrs({"max_ngram_size: int", "min_ngram_size: int", "max_draft_tokens: int",
            "num_model_steps: int"})
    .SetInplaceMap({{"draft_tokens", "draft_tokens_out"},
                    {"seq_lens_this_time", "seq_lens_this_time_out"}})
    .SetKernelFn(PD_KERNEL(HybridMtpNgram));
