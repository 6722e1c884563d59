// Framework-neutral launcher for hybrid_mtp_ngram (see hybrid_mtp_ngram.cu and docs/spec.md §5.8).
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

// N-gram drafts after the MTP drafts, in place. Slot b < bsz, s = num_model_steps: extended only
// when seq_lens_encoder[b] <= 0 (or seq_lens_encoder is NULL), seq_lens_decoder[b] != 0 and
// seq_lens_this_time[b] == 1 + s; every other slot is untouched. An extended slot, with
// h = input_ids[b, :P] ++ pre_ids[b, 1 : G + 1] ++ draft_tokens[b, 1 : 1 + s] (P = input_ids_len[b]
// clamped to [0, input_ids_stride], G = step_idx[b] clamped to [0, pre_ids_stride - 1]) and
// budget = min(draft_token_num[b], max_draft_tokens, draft_tokens_stride - 1,
// max_dec_len[b] - step_idx[b] - 1): when budget > s, the tokens after the most recent earlier
// occurrence of the longest suffix of h of length max_ngram_size .. min_ngram_size (at most
// budget - s of them) go to draft_tokens[b, 1 + s ..]; then -1 after the drafts and
// seq_lens_this_time[b] = 1 + s + their number. Columns 0 .. s are never written.
//   input_ids [>= bsz, input_ids_stride] int64 (may be NULL when input_ids_stride == 0)
//   input_ids_len, step_idx, max_dec_len: [>= bsz] int64
//   pre_ids [>= bsz, pre_ids_stride] int64; draft_tokens [>= bsz, draft_tokens_stride] int64
//   draft_token_num, seq_lens_decoder: [>= bsz] int32; seq_lens_encoder [>= bsz] int32 or NULL
//   seq_lens_this_time [bsz] int32
// Rows >= bsz are never read or written. Returns the cudaError_t as an int (0 on success;
// cudaErrorInvalidValue, nothing launched, for bsz < 0, input_ids_stride < 0, pre_ids_stride < 1,
// draft_tokens_stride < 1, sizes outside 1 <= min_ngram_size <= max_ngram_size <=
// SPECWORKER_NGRAM_MAX_SIZE, max_draft_tokens < 0, num_model_steps outside
// [0, draft_tokens_stride - 1], or a NULL required pointer).
int specworker_hybrid_mtp_ngram_launch(const int64_t* input_ids, const int64_t* input_ids_len,
                                       const int64_t* pre_ids, const int64_t* step_idx,
                                       const int32_t* draft_token_num, int64_t* draft_tokens,
                                       int32_t* seq_lens_this_time,
                                       const int32_t* seq_lens_decoder,
                                       const int64_t* max_dec_len,
                                       const int32_t* seq_lens_encoder, int bsz,
                                       int input_ids_stride, int pre_ids_stride,
                                       int draft_tokens_stride, int max_ngram_size,
                                       int min_ngram_size, int max_draft_tokens,
                                       int num_model_steps, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
