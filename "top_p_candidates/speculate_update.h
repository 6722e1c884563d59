// Framework-neutral launcher for speculate_update (see speculate_update.cu and
// custom_ops/cpu_ops/speculate_update.cc for the semantics).
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Commits one verified step, in place. Slot b < bsz, n = clamp(accept_num[b], 0, D):
// paused -> untouched; E > 0 -> Dec += E, E = 0, mask_rollback = 0; stopped -> mask_rollback
// = 0; running decode -> Dec += n, mask_rollback = L - n, adaptive actual_draft_token_nums
// when L > 1; n > 0 -> draft_tokens[b, 0] = accept_tokens[b, n - 1].
// not_need_stop[0] = (#stopped < stop_nums[0]), where paused, stopped and bsz <= b < max_bsz
// slots count as stopped.
//   seq_lens_encoder, seq_lens_decoder, actual_draft_token_nums, accept_num: [>= bsz] int32
//   not_need_stop [1] bool, stop_nums [1] int64 (device)
//   draft_tokens, accept_tokens: [>= bsz, max_draft_tokens] int64 (same row stride)
//   stop_flags, is_block_step: [>= bsz] bool; seq_lens_this_time: [bsz] int32
//   mask_rollback: [>= bsz] int32, or NULL (not computed)
// Rows >= bsz are never read or written. Returns the cudaError_t as an int (0 on success;
// cudaErrorInvalidValue for negative sizes, bsz > max_bsz, max_draft_tokens < 1 or a NULL
// required pointer).
int specworker_speculate_update_launch(int32_t* seq_lens_encoder, int32_t* seq_lens_decoder,
                                       bool* not_need_stop, int64_t* draft_tokens,
                                       int32_t* actual_draft_token_nums,
                                       const int64_t* accept_tokens, const int32_t* accept_num,
                                       const bool* stop_flags, const int32_t* seq_lens_this_time,
                                       const bool* is_block_step, const int64_t* stop_nums,
                                       int32_t* mask_rollback, int bsz, int max_bsz,
                                       int max_draft_tokens, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
