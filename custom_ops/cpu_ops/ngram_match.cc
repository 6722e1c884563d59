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
#include <utility>

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
constexpr int kMaxNgramSize = 64;  // = SPECWORKER_NGRAM_MAX_SIZE of the CUDA kernel
using paddle::DataType;

void CheckArgs(const paddle::Tensor& input_ids, const paddle::Tensor& input_ids_len,
               const paddle::Tensor& pre_ids, const paddle::Tensor& step_idx,
               const paddle::Tensor& draft_token_num, const paddle::Tensor& draft_tokens,
               const paddle::Tensor& seq_lens_this_time, const paddle::Tensor& seq_lens_encoder,
               const paddle::Tensor& seq_lens_decoder, const paddle::Tensor& max_dec_len,
               const paddle::optional<paddle::Tensor>& is_block_step, int max_ngram_size,
               int max_draft_tokens, int min_ngram_size) {
  using specworker::CheckPerSlotRows;
  using specworker::CheckSlotRows;
  const int64_t bsz =
      specworker::CheckPerSlot(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32);
  CheckPerSlotRows(kOp, "input_ids_len", input_ids_len, DataType::INT64, bsz);
  CheckPerSlotRows(kOp, "step_idx", step_idx, DataType::INT64, bsz);
  CheckPerSlotRows(kOp, "draft_token_num", draft_token_num, DataType::INT32, bsz);
  CheckPerSlotRows(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, bsz);
  CheckPerSlotRows(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, bsz);
  CheckPerSlotRows(kOp, "max_dec_len", max_dec_len, DataType::INT64, bsz);
  if (is_block_step) CheckPerSlotRows(kOp, "is_block_step", *is_block_step, DataType::BOOL, bsz);
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
  const std::pair<const char*, const paddle::Tensor*> others[] = {
      {"input_ids", &input_ids},         {"input_ids_len", &input_ids_len},
      {"pre_ids", &pre_ids},             {"step_idx", &step_idx},
      {"draft_token_num", &draft_token_num}, {"draft_tokens", &draft_tokens},
      {"seq_lens_encoder", &seq_lens_encoder}, {"seq_lens_decoder", &seq_lens_decoder},
      {"max_dec_len", &max_dec_len}};
  for (const auto& [name, t] : others) {
    specworker::CheckSamePlace(kOp, name, *t, seq_lens_this_time, "seq_lens_this_time");
  }
  if (is_block_step) {
    specworker::CheckSamePlace(kOp, "is_block_step", *is_block_step, seq_lens_this_time,
                               "seq_lens_this_time");
  }
}

// Raw views of the inputs; paused is nullptr when is_block_step is omitted.
struct Slots {
  const int64_t* prompt;
  const int64_t* prompt_len;
  const int64_t* pre_ids;
  const int64_t* step_idx;
  const int32_t* budget;
  int64_t* drafts;
  int32_t* lens;
  const int32_t* enc;
  const int32_t* dec;
  const int64_t* max_dec_len;
  const bool* paused;
  int64_t S_in, S, D;

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
    if (!s.IsDecode(b)) continue;
    PD_CHECK(s.prompt_len[b] >= 0 && s.prompt_len[b] <= s.S_in, kOp, ": input_ids_len[", b,
             "] = ", s.prompt_len[b], ", expected 0 <= input_ids_len <= ", s.S_in,
             " (the width of input_ids)");
    PD_CHECK(s.step_idx[b] >= 0 && s.step_idx[b] <= s.S - 1, kOp, ": step_idx[", b, "] = ",
             s.step_idx[b], ", expected 0 <= step_idx <= ", s.S - 1,
             " (generated tokens sit in pre_ids columns 1 .. step_idx)");
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
    const int64_t room = s.max_dec_len[b] - s.step_idx[b] - 1;
    const int64_t budget = std::min({static_cast<int64_t>(s.budget[b]),
                                     static_cast<int64_t>(max_draft_tokens), s.D - 1, room});
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
  specworker::CheckGiven(kOp, {{"input_ids", &input_ids}, {"input_ids_len", &input_ids_len},
                               {"pre_ids", &pre_ids}, {"step_idx", &step_idx},
                               {"draft_token_num", &draft_token_num}, {"draft_tokens", &draft_tokens},
                               {"seq_lens_this_time", &seq_lens_this_time},
                               {"seq_lens_encoder", &seq_lens_encoder},
                               {"seq_lens_decoder", &seq_lens_decoder}, {"max_dec_len", &max_dec_len}});
  CheckArgs(input_ids, input_ids_len, pre_ids, step_idx, draft_token_num, draft_tokens,
            seq_lens_this_time, seq_lens_encoder, seq_lens_decoder, max_dec_len, is_block_step,
            max_ngram_size, max_draft_tokens, min_ngram_size);
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
  const Slots s{input_ids.data<int64_t>(),
                input_ids_len.data<int64_t>(),
                pre_ids.data<int64_t>(),
                step_idx.data<int64_t>(),
                draft_token_num.data<int32_t>(),
                draft_tokens.data<int64_t>(),
                seq_lens_this_time.data<int32_t>(),
                seq_lens_encoder.data<int32_t>(),
                seq_lens_decoder.data<int32_t>(),
                max_dec_len.data<int64_t>(),
                is_block_step ? is_block_step->data<bool>() : nullptr,
                input_ids.shape()[1],
                pre_ids.shape()[1],
                draft_tokens.shape()[1]};
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
