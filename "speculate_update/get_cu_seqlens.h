// Framework-neutral launcher for get_cu_seqlens (see get_cu_seqlens.cu).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// cu_seqlens[0] = 0, cu_seqlens[b + 1] = sum_{j <= b} max(seq_lens[j], 0).
// seq_lens: [bsz] int32 (device); cu_seqlens: [bsz + 1] int32 (device).
// Returns the cudaError_t of the launch as an int (0 on success).
int specworker_get_cu_seqlens_launch(const int32_t* seq_lens, int bsz, int32_t* cu_seqlens,
                                     cudaStream_t stream);

#ifdef __cplusplus
}
#endif
