// Framework-neutral launcher for eagle_get_hidden_states (see eagle_get_hidden_states.cu).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Packs, per slot, the first k_b of the slot's target rows into out (docs/spec.md §5; docs/spec.md §8.13):
// k_b = 0 if seq_lens_this_time[b] <= 0, else seq_lens_encoder[b] if > 0, else accept_num[b],
// clamped into [0, max(target_model_seq_lens_this_time[b], 0)]. Slot b's target rows start at
// the exclusive prefix sum of target_model_seq_lens_this_time.
//   input [token_num, hidden_size] and out [capacity, hidden_size]: elements of elem_size bytes
//   (the kernel moves bytes, so any 1/2/4/8-byte dtype works); per-slot inputs [bsz] int32;
//   scratch: [2 * bsz + 1] int32 of device memory the caller owns (row offsets; no allocation
//   here); output_token_num [1] int32 = min(sum k_b, capacity).
// Output rows [output_token_num, capacity) are zeroed; a row whose source is >= token_num is
// zeroed too; no row >= capacity is written. Two launches on the stream, no host sync.
// Returns the cudaError_t as an int (0 on success; cudaErrorInvalidValue for negative sizes,
// elem_size not in {1, 2, 4, 8}, or a NULL pointer that would be used).
int specworker_eagle_get_hidden_states_launch(
    const void* input, int token_num, int hidden_size, int elem_size,
    const int32_t* seq_lens_this_time, const int32_t* seq_lens_encoder,
    const int32_t* accept_num, const int32_t* target_model_seq_lens_this_time, int bsz,
    int32_t* scratch, void* out, int capacity, int32_t* output_token_num, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
