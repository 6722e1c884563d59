// Framework-neutral launchers for fused_swiglu (see fused_swiglu.cu).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// out[r, i] = fl(silu(gate_up[r, i]) * gate_up[r, inter + i]) with the float32 silu of docs/spec.md §4.12.
//   gate_up  [rows, 2 * inter] float32: gate columns, then up
//   out      [rows, inter] float32, fully written
// Returns the cudaError_t as an int: cudaErrorInvalidValue for rows < 0, inter < 1, and with rows > 0 a NULL
// gate_up or out; else the launch's error (0 on success; rows == 0 launches nothing).
int specworker_fused_swiglu_launch(const float* gate_up, float* out, int rows, int inter, cudaStream_t stream);

// The same on bfloat16 tensors (gate_up and out bf16, same shapes and checks): float32 arithmetic in the order
// above on the exactly widened inputs, each output rounded to bf16 (nearest even) once.
int specworker_fused_swiglu_bf16_launch(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int rows, int inter,
                                        cudaStream_t stream);

#ifdef __cplusplus
}
#endif
