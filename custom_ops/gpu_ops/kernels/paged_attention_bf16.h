// Framework-neutral launcher of paged_attention's bfloat16 path (see paged_attention_bf16.cu).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Bytes of float32 workspace the launcher below needs: token_cap * num_heads * nc * (head_dim + 2) * 4 with
// nc = ceil(max_blocks_per_seq * block_size / 128), the per-(row, head) states of 128-key chunks. -1 for a
// negative size or block_size < 1.
int64_t specworker_paged_attention_bf16_workspace_bytes(int token_cap, int num_heads, int head_dim,
                                                        int block_size, int max_blocks_per_seq);

// paged_attention on bfloat16 tensors (specworker_paged_attention_launch's contract; docs/spec.md §4.9 for
// the arithmetic): appends this step's k/v rows to the paged cache, then out = causal attention of every
// packed row over its slot's positions 0..p on tensor cores, float32 scores, softmax and sums. All pointers
// are device pointers:
//   q [token_cap, num_heads, head_dim]; k, v [token_cap, num_kv_heads, head_dim]
//   key_cache, value_cache [num_blocks, num_kv_heads, block_size, head_dim], updated in place
//   block_tables [>= bsz, max_blocks_per_seq] int32 (-1 = unallocated)
//   cu_seqlens_q [bsz + 1], seq_lens_decoder [>= bsz], seq_lens_this_time [bsz],
//   batch_id_per_token [token_cap] int32; out [token_cap, num_heads, head_dim], fully written;
//   workspace: at least specworker_paged_attention_bf16_workspace_bytes(...) bytes, contents ignored.
// Index values are bound-checked, not reported (no host sync), as in specworker_paged_attention_launch; a row
// whose query tile's first row (local index rounded down to a multiple of 16 / min(group, 16)) cannot be
// computed is zero too. Returns the cudaError_t as an int: cudaErrorInvalidValue for bad sizes (num_heads
// not a multiple of num_kv_heads, head_dim outside [1, 256], num_heads > 65535, max_blocks_per_seq * block_size
// past INT32_MAX, a workspace smaller than needed, ...);
// cudaErrorNotSupported before sm_80; else the launches' error (0 on success). No launch when token_cap == 0.
int specworker_paged_attention_bf16_launch(const __nv_bfloat16* q, const __nv_bfloat16* k,
                                           const __nv_bfloat16* v, __nv_bfloat16* key_cache,
                                           __nv_bfloat16* value_cache, const int32_t* block_tables,
                                           const int32_t* cu_seqlens_q, const int32_t* seq_lens_decoder,
                                           const int32_t* seq_lens_this_time,
                                           const int32_t* batch_id_per_token, __nv_bfloat16* out,
                                           float* workspace, int64_t workspace_bytes, int token_cap, int bsz,
                                           int num_heads, int num_kv_heads, int head_dim, int num_blocks,
                                           int block_size, int max_blocks_per_seq, float scale,
                                           cudaStream_t stream);

#ifdef __cplusplus
}
#endif
