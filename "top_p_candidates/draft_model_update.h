// Framework-neutral launcher for draft_model_update (see draft_model_update.cu).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// After draft substep `substep`: per slot b < bsz, takes the draft token from the slot's last
// sampled row (cu_seqlens_q_output[b + 1] - 1), advances the draft state, proposes the token in
// base_model_draft_tokens[b, substep + 1] (or -1), and sets *not_need_stop = any slot running.
// All pointers are device pointers; everything except inter_next_tokens, cu_seqlens_q_output
// and max_dec_len is updated in place.
//   inter_next_tokens [rows] int64        draft_tokens [>= bsz, draft_width] int64
//   pre_ids [>= bsz, pre_ids_width] int64 seq_lens_this_time / _encoder / _decoder [bsz] int32
//   step_idx [bsz] int64                  cu_seqlens_q_output [bsz + 1] int32
//   stop_flags [bsz] bool                 not_need_stop [1] bool
//   max_dec_len [bsz] int64               base_model_draft_tokens [>= bsz, base_width] int64
// Requires draft_width >= 1 and 0 <= substep < base_width - 1 (else cudaErrorInvalidValue,
// nothing launched). Zeroes not_need_stop with cudaMemsetAsync, then one kernel; no host sync,
// no allocation. Returns the cudaError_t of the launches as an int (0 on success).
int specworker_draft_model_update_launch(
    const int64_t* inter_next_tokens, int rows, int64_t* draft_tokens, int draft_width,
    int64_t* pre_ids, int pre_ids_width, int32_t* seq_lens_this_time, int32_t* seq_lens_encoder,
    int32_t* seq_lens_decoder, int64_t* step_idx, const int32_t* cu_seqlens_q_output,
    bool* stop_flags, bool* not_need_stop, const int64_t* max_dec_len,
    int64_t* base_model_draft_tokens, int base_width, int bsz, int substep,
    cudaStream_t stream);

#ifdef __cplusplus
}
#endif
