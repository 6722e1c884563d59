// Framework-neutral launcher for rebuild_padding (see rebuild_padding.cu).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Gathers the hidden rows that need logits (docs/spec.md §4.4) and zero-fills every other output row.
//   tmp_out            [token_num, hidden]  elements of elem_bytes bytes (2: fp16/bf16, 4: fp32)
//   cu_seqlens_q       [bsz + 1] int32;  seq_len_this_time, seq_lens_decoder, seq_lens_encoder [bsz] int32
//   batch_id_per_token_output [out_rows] int32 and cu_seqlens_q_output [bsz + 1] int32: both or neither
//     (both NULL: out_rows must equal bsz, one output row per slot)
//   out                [out_rows, hidden]  same element type as tmp_out, fully written
//   first_token_out    [bsz, hidden] or NULL; written for prefill slots when enable_logprob != 0
// The kernel copies bits, so the dtype enters only through elem_bytes; one launcher serves all three.
// Rows whose indices are out of range are written as zeros (no host sync to report them).
// Returns the cudaError_t as an int: cudaErrorInvalidValue for bad sizes, an unpaired index
// tensor, or enable_logprob without first_token_out; else the launch's error (0 on success).
int specworker_rebuild_padding_launch(const void* tmp_out, const int32_t* cu_seqlens_q,
                                      const int32_t* seq_len_this_time,
                                      const int32_t* seq_lens_decoder,
                                      const int32_t* seq_lens_encoder,
                                      const int32_t* batch_id_per_token_output,
                                      const int32_t* cu_seqlens_q_output, void* first_token_out,
                                      int enable_logprob, void* out, int token_num, int bsz,
                                      int out_rows, int hidden, int elem_bytes,
                                      cudaStream_t stream);

#ifdef __cplusplus
}
#endif
