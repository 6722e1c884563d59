// fused_swiglu CUDA kernel: silu(gate) * up of the packed MLP projection (docs/spec.md §4.12).
//   gate_up [rows, 2 * inter] (gate columns, then up) -> out [rows, inter], float32 or bfloat16
// out[r, i] = fl(silu(gate_up[r, i]) * gate_up[r, inter + i]), silu the float32 sequence of silu_f32.h, which the
// CPU op (cpu_ops/fused_swiglu.cc) runs too: every step an explicit __fadd_rn / __fsub_rn / __fmul_rn / __fdiv_rn,
// so nvcc can neither contract nor approximate them, and the devices agree bit for bit.
// bfloat16 variant (specworker_fused_swiglu_bf16_launch): gate_up and out bf16; the inputs widen exactly to float32,
// the arithmetic runs unchanged in float32, and each output is rounded to bf16 once when stored. One kernel template
// serves both.
// Parallelisation: one thread per output, a grid-stride loop over rows * inter (consecutive threads read
// consecutive gate and up columns). An output depends on its two inputs alone, so a row's bits never depend on rows.
#include "fused_swiglu.h"

#include "dtype_convert.cuh"
#include "silu_f32.h"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;  // the grid-stride loop covers the rest

using specworker::FromFloat;
using specworker::ToFloat;

template <typename T>
__global__ void FusedSwigluKernel(const T* __restrict__ gate_up, T* __restrict__ out, int64_t total, int inter) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const int64_t row = idx / inter;
    const int64_t gate = idx + row * inter;  // row * 2 * inter + (idx - row * inter)
    const float silu = specworker::silu::SiluF32(ToFloat(gate_up[gate]));
    out[idx] = FromFloat<T>(__fmul_rn(silu, ToFloat(gate_up[gate + inter])));
  }
}

template <typename T>
int Launch(const T* gate_up, T* out, int rows, int inter, cudaStream_t stream) {
  // A zero-size tensor may have no storage (a NULL pointer), so pointers are checked only when rows > 0.
  const bool bad = rows < 0 || inter < 1 || (rows > 0 && (gate_up == nullptr || out == nullptr));
  if (bad) return static_cast<int>(cudaErrorInvalidValue);
  if (rows == 0) return static_cast<int>(cudaSuccess);
  const int64_t total = static_cast<int64_t>(rows) * inter;
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  FusedSwigluKernel<T><<<static_cast<int>(blocks < kMaxBlocks ? blocks : kMaxBlocks), kThreads, 0, stream>>>(
      gate_up, out, total, inter);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

extern "C" int specworker_fused_swiglu_launch(const float* gate_up, float* out, int rows, int inter,
                                              cudaStream_t stream) {
  return Launch(gate_up, out, rows, inter, stream);
}

extern "C" int specworker_fused_swiglu_bf16_launch(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int rows,
                                                   int inter, cudaStream_t stream) {
  return Launch(gate_up, out, rows, inter, stream);
}
