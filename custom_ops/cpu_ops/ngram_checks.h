// Argument checks and per-slot rules shared by ngram_match and hybrid_mtp_ngram (docs/spec.md §5.7,
// §5.8): both read the same history and budget inputs and bound them the same way; each op checks its
// own extra inputs (seq_lens_encoder, is_block_step, num_model_steps) after these.
#pragma once
#include <algorithm>
#include <cstdint>
#include <utility>

#include "op_checks.h"

namespace specworker {

constexpr int kNgramMaxSize = 64;  // = SPECWORKER_NGRAM_MAX_SIZE of the CUDA kernels

// The inputs both ops take, under their argument names.
struct NgramInputs {
  const paddle::Tensor& input_ids;           // [N, S_in] int64
  const paddle::Tensor& input_ids_len;       // [N] int64
  const paddle::Tensor& pre_ids;             // [N, S] int64
  const paddle::Tensor& step_idx;            // [N] int64
  const paddle::Tensor& draft_token_num;     // [N] int32
  paddle::Tensor& draft_tokens;              // [N, D] int64, written
  paddle::Tensor& seq_lens_this_time;        // [bsz] int32, written
  const paddle::Tensor& seq_lens_decoder;    // [N] int32
  const paddle::Tensor& max_dec_len;         // [N] int64
};

struct NgramDims {
  int64_t bsz, D;
};

// All given (CheckGiven), dtypes, per-slot rows (>= bsz), the widths S >= 1 and D >= 1, int32 sizes,
// the n-gram attributes and one place for all inputs; returns bsz and D.
inline NgramDims CheckNgramInputs(const char* op, const NgramInputs& in, int max_ngram_size,
                                  int min_ngram_size, int max_draft_tokens) {
  using paddle::DataType;
  CheckGiven(op, {{"input_ids", &in.input_ids}, {"input_ids_len", &in.input_ids_len},
                  {"pre_ids", &in.pre_ids}, {"step_idx", &in.step_idx},
                  {"draft_token_num", &in.draft_token_num}, {"draft_tokens", &in.draft_tokens},
                  {"seq_lens_this_time", &in.seq_lens_this_time},
                  {"seq_lens_decoder", &in.seq_lens_decoder}, {"max_dec_len", &in.max_dec_len}});
  const int64_t bsz = CheckPerSlot(op, "seq_lens_this_time", in.seq_lens_this_time, DataType::INT32);
  CheckPerSlotRows(op, "input_ids_len", in.input_ids_len, DataType::INT64, bsz);
  CheckPerSlotRows(op, "step_idx", in.step_idx, DataType::INT64, bsz);
  CheckPerSlotRows(op, "draft_token_num", in.draft_token_num, DataType::INT32, bsz);
  CheckPerSlotRows(op, "seq_lens_decoder", in.seq_lens_decoder, DataType::INT32, bsz);
  CheckPerSlotRows(op, "max_dec_len", in.max_dec_len, DataType::INT64, bsz);
  CheckSlotRows(op, "input_ids", in.input_ids, DataType::INT64, bsz);
  const int64_t S = CheckSlotRows(op, "pre_ids", in.pre_ids, DataType::INT64, bsz);
  PD_CHECK(S >= 1, op, ": pre_ids has shape ", ShapeStr(in.pre_ids.shape()),
           ", expected [N, S] with S >= 1 (column 0 is unused, generated tokens from column 1)");
  const int64_t D = CheckSlotRows(op, "draft_tokens", in.draft_tokens, DataType::INT64, bsz);
  PD_CHECK(D >= 1, op, ": draft_tokens has shape ", ShapeStr(in.draft_tokens.shape()),
           ", expected a width D = k + 1 >= 1");
  CheckFitsInt32(op, "bsz", bsz);
  CheckFitsInt32(op, "input_ids width", in.input_ids.shape()[1]);
  CheckFitsInt32(op, "pre_ids width", S);
  CheckFitsInt32(op, "draft_tokens width", D);
  PD_CHECK(1 <= min_ngram_size && min_ngram_size <= max_ngram_size &&
               max_ngram_size <= kNgramMaxSize,
           op, ": min_ngram_size = ", min_ngram_size, ", max_ngram_size = ", max_ngram_size,
           ", expected 1 <= min_ngram_size <= max_ngram_size <= ", kNgramMaxSize);
  PD_CHECK(max_draft_tokens >= 0, op, ": max_draft_tokens = ", max_draft_tokens, ", expected >= 0");
  const std::pair<const char*, const paddle::Tensor*> others[] = {
      {"input_ids", &in.input_ids},             {"input_ids_len", &in.input_ids_len},
      {"pre_ids", &in.pre_ids},                 {"step_idx", &in.step_idx},
      {"draft_token_num", &in.draft_token_num}, {"draft_tokens", &in.draft_tokens},
      {"seq_lens_decoder", &in.seq_lens_decoder}, {"max_dec_len", &in.max_dec_len}};
  for (const auto& [name, t] : others) {
    CheckSamePlace(op, name, *t, in.seq_lens_this_time, "seq_lens_this_time");
  }
  return {bsz, D};
}

// An optional per-slot input of a slot-count >= bsz, on the place of seq_lens_this_time.
inline void CheckNgramPerSlotInput(const char* op, const char* name, const paddle::Tensor& x,
                                   paddle::DataType dtype, const paddle::Tensor& seq_lens_this_time,
                                   int64_t bsz) {
  CheckPerSlotRows(op, name, x, dtype, bsz);
  CheckSamePlace(op, name, x, seq_lens_this_time, "seq_lens_this_time");
}

// Raw views of the inputs both CPU kernels read; each op's Slots adds its own.
struct NgramRows {
  const int64_t* prompt;
  const int64_t* prompt_len;
  const int64_t* pre_ids;
  const int64_t* step_idx;
  const int32_t* budget;
  int64_t* drafts;
  int32_t* lens;
  const int32_t* dec;
  const int64_t* max_dec_len;
  int64_t S_in, S, D;
};

inline NgramRows NgramRowsOf(const NgramInputs& in) {
  return {in.input_ids.data<int64_t>(),       in.input_ids_len.data<int64_t>(),
          in.pre_ids.data<int64_t>(),         in.step_idx.data<int64_t>(),
          in.draft_token_num.data<int32_t>(), in.draft_tokens.data<int64_t>(),
          in.seq_lens_this_time.data<int32_t>(), in.seq_lens_decoder.data<int32_t>(),
          in.max_dec_len.data<int64_t>(),     in.input_ids.shape()[1],
          in.pre_ids.shape()[1],              in.draft_tokens.shape()[1]};
}

// The CPU kernels raise, before writing anything, on a searched slot whose history indices leave the
// buffers (the CUDA kernels clamp them instead).
inline void CheckSlotHistory(const char* op, int64_t b, int64_t prompt_len, int64_t S_in,
                             int64_t step_idx, int64_t S) {
  PD_CHECK(prompt_len >= 0 && prompt_len <= S_in, op, ": input_ids_len[", b, "] = ", prompt_len,
           ", expected 0 <= input_ids_len <= ", S_in, " (the width of input_ids)");
  PD_CHECK(step_idx >= 0 && step_idx <= S - 1, op, ": step_idx[", b, "] = ", step_idx,
           ", expected 0 <= step_idx <= ", S - 1,
           " (generated tokens sit in pre_ids columns 1 .. step_idx)");
}

// Drafts a slot may hold in all: min(draft_token_num, max_draft_tokens, D - 1, max_dec_len - G - 1).
inline int64_t NgramSlotBudget(int32_t draft_token_num, int max_draft_tokens, int64_t D,
                               int64_t max_dec_len, int64_t step_idx) {
  return std::min({static_cast<int64_t>(draft_token_num), static_cast<int64_t>(max_draft_tokens),
                   D - 1, max_dec_len - step_idx - 1});
}

}  // namespace specworker
