// Framework-neutral launcher for ngram_match (see ngram_match.cu and docs/spec.md "ngram_match").
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#ifndef SPECWORKER_NGRAM_MAX_SIZE
#define SPECWORKER_NGRAM_MAX_SIZE 64  // largest max_ngram_size (the suffix lives in shared memory)
#endif

#ifdef __cplusplus
extern "C" {
#endif

// Prompt-lookup drafts, in place. Slot b < bsz: E > 0 -> untouched; paused (is_block_step) or
// Dec == 0 -> seq_lens_this_time[b] = 0; decode -> with h = input_ids[b, :P] ++
// pre_ids[b, 1 : G + 1] (P = input_ids_len[b] clamped to [0, input_ids_stride], G = step_idx[b]
// clamped to [0, pre_ids_stride - 1]) and budget = min(draft_token_num[b], max_draft_tokens,
// draft_tokens_stride - 1, max_dec_len[b] - step_idx[b] - 1): the tokens after the most recent
// earlier occurrence of the longest suffix of h of length max_ngram_size .. min_ngram_size
// (at most budget of them) go to draft_tokens[b, 1 ..], -1 after them, and
// seq_lens_this_time[b] = 1 + their number. Column 0 of draft_tokens is never written.
//   input_ids [>= bsz, input_ids_stride] int64 (may be NULL when input_ids_stride == 0)
//   input_ids_len, step_idx, max_dec_len: [>= bsz] int64
//   pre_ids [>= bsz, pre_ids_stride] int64; draft_tokens [>= bsz, draft_tokens_stride] int64
//   draft_token_num, seq_lens_encoder, seq_lens_decoder: [>= bsz] int32
//   seq_lens_this_time [bsz] int32; is_block_step [>= bsz] bool or NULL (no slot paused)
// Rows >= bsz are never read or written. Returns the cudaError_t as an int (0 on success;
// cudaErrorInvalidValue, nothing launched, for bsz < 0, input_ids_stride < 0, pre_ids_stride < 1,
// draft_tokens_stride < 1, sizes outside 1 <= min_ngram_size <= max_ngram_size <=
// SPECWORKER_NGRAM_MAX_SIZE, max_draft_tokens < 0, or a NULL required pointer).
int specworker_ngram_match_launch(const int64_t* input_ids, const int64_t* input_ids_len,
                                  const int64_t* pre_ids, const int64_t* step_idx,
                                  const int32_t* draft_token_num, int64_t* draft_tokens,
                                  int32_t* seq_lens_this_time, const int32_t* seq_lens_encoder,
                                  const int32_t* seq_lens_decoder, const int64_t* max_dec_len,
                                  const bool* is_block_step, int bsz, int input_ids_stride,
                                  int pre_ids_stride, int draft_tokens_stride, int max_ngram_size,
                                  int max_draft_tokens, int min_ngram_size, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
