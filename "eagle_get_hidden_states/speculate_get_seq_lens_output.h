// Framework-neutral launcher for speculate_get_seq_lens_output (see its .cu).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// seq_lens_output[b] = 0 if L_b <= 0, 1 if L_b == 1 or E_b != 0, else L_b, with
// L_b = seq_lens_this_time[b] and E_b = seq_lens_encoder[b]; all [bsz] int32 (device).
// Returns the cudaError_t of the launch as an int (0 on success; bsz == 0 launches nothing).
int specworker_speculate_get_seq_lens_output_launch(const int32_t* seq_lens_this_time,
                                                    const int32_t* seq_lens_encoder, int bsz,
                                                    int32_t* seq_lens_output,
                                                    cudaStream_t stream);

#ifdef __cplusplus
}
#endif
