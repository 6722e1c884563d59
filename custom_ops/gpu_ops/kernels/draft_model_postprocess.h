// Framework-neutral launcher for draft_model_postprocess (see draft_model_postprocess.cu).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Hands the proposer's drafts back to the target: per slot b < bsz,
//   stop_flags[b] or is_block_step[b] (paused) -> seq_lens_this_time[b] = 0;
//   else seq_lens_encoder[b] > 0 (prefill) -> seq_lens_this_time[b] unchanged;
//   else (decode)              -> seq_lens_this_time[b] = 1 + the number of drafts in
//                                 base_model_draft_tokens[b, 1 ..] before the first -1.
// base_model_draft_tokens [>= bsz, width] int64 (width >= 1); seq_lens_this_time [bsz] int32
// (in place); seq_lens_encoder [bsz] int32; stop_flags [bsz] bool; is_block_step [bsz] bool or
// nullptr (omitted: no slot is paused); all device pointers.
// Returns the cudaError_t of the launch as an int (0 on success; cudaErrorInvalidValue for
// bsz < 0 or width < 1, nothing launched).
int specworker_draft_model_postprocess_launch(const int64_t* base_model_draft_tokens, int width,
                                              int32_t* seq_lens_this_time,
                                              const int32_t* seq_lens_encoder,
                                              const bool* stop_flags, const bool* is_block_step,
                                              int bsz, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
