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
#include <utility>

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
constexpr int kMaxNgramSize = 64;  // = SPECWORKER_NGRAM_MAX_SIZE of the CUDA kernel
using paddle::DataType;

void CheckArgs(const paddle::Tensor& input_ids, const paddle::Tensor& input_ids_len,
               const paddle::Tensor& pre_ids, const paddle::Tensor& step_idx,
               const paddle::Tensor& draft_token_num, const paddle::Tensor& draft_tokens,
               const paddle::Tensor& seq_lens_this_time, const paddle::Tensor& seq_lens_decoder,
               const paddle::Tensor& max_dec_len,
               const paddle::optional<paddle::Tensor>& seq_lens_encoder, int max_ngram_size,
               int min_ngram_size, int max_draft_tokens, int num_model_steps) {
  using specworker::CheckPerSlotRows;
  using specworker::CheckSlotRows;
  const int64_t bsz =
      specworker::CheckPerSlot(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32);
  CheckPerSlotRows(kOp, "input_ids_len", input_ids_len, DataType::INT64, bsz);
  CheckPerSlotRows(kOp, "step_idx", step_idx, DataType::INT64, bsz);
  CheckPerSlotRows(kOp, "draft_token_num", draft_token_num, DataType::INT32, bsz);
  CheckPerSlotRows(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, bsz);
  CheckPerSlotRows(kOp, "max_dec_len", max_dec_len, DataType::INT64, bsz);
  if (seq_lens_encoder) {
    CheckPerSlotRows(kOp, "seq_lens_encoder", *seq_lens_encoder, DataType::INT32, bsz);
  }
  CheckSlotRows(kOp, "input_ids", input_ids, DataType::INT64, bsz);
  const int64_t S = CheckSlotRows(kOp, "pre_ids", pre_ids, DataType::INT64, bsz);
  PD_CHECK(S >= 1, kOp, ": pre_ids has shape ", specworker::ShapeStr(pre_ids.shape()),
           ", expected [N, S] with S >= 1 (column 0 is unused, generated tokens from column 1)");
  const int64_t D = CheckSlotRows(kOp, "draft_tokens", draft_tokens, DataType::INT64, bsz);
  PD_CHECK(D >= 1, kOp, ": draft_tokens has shape ", specworker::ShapeStr(draft_tokens.shape()),
           ", expected a width D = k + 1 >= 1");
  specworker::CheckFitsInt32(kOp, "bsz", bsz);
  specworker::CheckFitsInt32(kOp, "input_ids width", input_ids.shape()[1]);
  specworker::CheckFitsInt32(kOp, "pre_ids width", S);
  specworker::CheckFitsInt32(kOp, "draft_tokens width", D);
  PD_CHECK(1 <= min_ngram_size && min_ngram_size <= max_ngram_size &&
               max_ngram_size <= kMaxNgramSize,
           kOp, ": min_ngram_size = ", min_ngram_size, ", max_ngram_size = ", max_ngram_size,
           ", expected 1 <= min_ngram_size <= max_ngram_size <= ", kMaxNgramSize);
  PD_CHECK(max_draft_tokens >= 0, kOp, ": max_draft_tokens = ", max_draft_tokens,
           ", expected >= 0");
  PD_CHECK(0 <= num_model_steps && num_model_steps <= D - 1, kOp, ": num_model_steps = ",
           num_model_steps, ", expected 0 <= num_model_steps <= D - 1 = ", D - 1,
           " (the MTP drafts sit in draft_tokens columns 1 .. num_model_steps)");
  const std::pair<const char*, const paddle::Tensor*> others[] = {
      {"input_ids", &input_ids},           {"input_ids_len", &input_ids_len},
      {"pre_ids", &pre_ids},               {"step_idx", &step_idx},
      {"draft_token_num", &draft_token_num}, {"draft_tokens", &draft_tokens},
      {"seq_lens_decoder", &seq_lens_decoder}, {"max_dec_len", &max_dec_len}};
  for (const auto& [name, t] : others) {
    specworker::CheckSamePlace(kOp, name, *t, seq_lens_this_time, "seq_lens_this_time");
  }
  if (seq_lens_encoder) {
    specworker::CheckSamePlace(kOp, "seq_lens_encoder", *seq_lens_encoder, seq_lens_this_time,
                               "seq_lens_this_time");
  }
}

// Raw views of the inputs; enc is nullptr when seq_lens_encoder is omitted.
struct Slots {
  const int64_t* prompt;
  const int64_t* prompt_len;
  const int64_t* pre_ids;
  const int64_t* step_idx;
  const int32_t* budget;
  int64_t* drafts;
  int32_t* lens;
  const int32_t* dec;
  const int64_t* max_dec_len;
  const int32_t* enc;
  int64_t S_in, S, D;
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
    if (!s.Extends(b)) continue;
    PD_CHECK(s.prompt_len[b] >= 0 && s.prompt_len[b] <= s.S_in, kOp, ": input_ids_len[", b,
             "] = ", s.prompt_len[b], ", expected 0 <= input_ids_len <= ", s.S_in,
             " (the width of input_ids)");
    PD_CHECK(s.step_idx[b] >= 0 && s.step_idx[b] <= s.S - 1, kOp, ": step_idx[", b, "] = ",
             s.step_idx[b], ", expected 0 <= step_idx <= ", s.S - 1,
             " (generated tokens sit in pre_ids columns 1 .. step_idx)");
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
    const int64_t room = s.max_dec_len[b] - s.step_idx[b] - 1;
    const int64_t budget = std::min({static_cast<int64_t>(s.budget[b]),
                                     static_cast<int64_t>(max_draft_tokens), s.D - 1, room});
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
  specworker::CheckGiven(kOp, {{"input_ids", &input_ids}, {"input_ids_len", &input_ids_len},
                               {"pre_ids", &pre_ids}, {"step_idx", &step_idx},
                               {"draft_token_num", &draft_token_num}, {"draft_tokens", &draft_tokens},
                               {"seq_lens_this_time", &seq_lens_this_time},
                               {"seq_lens_decoder", &seq_lens_decoder}, {"max_dec_len", &max_dec_len}});
  CheckArgs(input_ids, input_ids_len, pre_ids, step_idx, draft_token_num, draft_tokens,
            seq_lens_this_time, seq_lens_decoder, max_dec_len, seq_lens_encoder, max_ngram_size,
            min_ngram_size, max_draft_tokens, num_model_steps);
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
  const Slots s{input_ids.data<int64_t>(),
                input_ids_len.data<int64_t>(),
                pre_ids.data<int64_t>(),
                step_idx.data<int64_t>(),
                draft_token_num.data<int32_t>(),
                draft_tokens.data<int64_t>(),
                seq_lens_this_time.data<int32_t>(),
                seq_lens_decoder.data<int32_t>(),
                max_dec_len.data<int64_t>(),
                seq_lens_encoder ? seq_lens_encoder->data<int32_t>() : nullptr,
                input_ids.shape()[1],
                pre_ids.shape()[1],
                draft_tokens.shape()[1],
                num_model_steps};
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
