// fused_rms_norm CUDA kernel: residual add + RMSNorm per row (docs/spec.md §4.10).
//   x [rows, hidden], optional residual [rows, hidden], weight [hidden], all float32
//   -> out [rows, hidden], residual_out [rows, hidden] (h = fl(x + residual); only with residual)
// Per row, in this IEEE order (the CPU op's, cpu_ops/fused_rms_norm.cc, so the bits agree):
//   acc = +0; for k = 0 .. hidden - 1: acc = fl(acc + fl(fl(h_k * h_k) * fl(1 / hidden)))
//   rs = sqrt_rn(fl(acc + eps)); out_k = fl(fl(h_k / rs) * weight_k)
// Every operation is an explicit __fadd_rn / __fmul_rn / __fdiv_rn / __fsqrt_rn, so nvcc can neither
// contract nor approximate them.
// bfloat16 variant (specworker_fused_rms_norm_bf16_launch): x, weight, residual, out, residual_out bf16; the inputs
// widen exactly to float32, the arithmetic above runs unchanged in float32 (h included: the norm uses the float32
// h, not its rounding), and each output value is rounded to bf16 once when stored. One kernel template serves both.
// Parallelisation: one warp per row, kWarps rows per block. The lanes form h_k for k = lane, lane + 32,
// ... (writing residual_out) and stage the terms fl(fl(h_k * h_k) * inv_h) in shared memory; lane 0
// adds them in k order (the sum must be sequential in k: no tree reduction), broadcasts rs, and the
// lanes write out. A row too wide for the staging buffer (hidden > kMaxStaged) has lane 0 form the
// terms itself from global memory (same bits, slower). Nothing depends on the row's neighbours, so a
// row's bits never depend on rows (batch invariant).
#include "fused_rms_norm.h"

#include "dtype_convert.cuh"

namespace {

constexpr int kWarpSize = 32;
constexpr int kMaxStagedBytes = 48 * 1024;            // default dynamic shared memory limit
constexpr int kMaxStaged = kMaxStagedBytes / 4;        // floats: one warp's row
constexpr int kWarps = 4;                              // rows per block when they fit

using specworker::FromFloat;
using specworker::ToFloat;

template <typename T>
__device__ __forceinline__ float LoadH(const T* x, const T* residual, int64_t i) {
  return residual == nullptr ? ToFloat(x[i]) : __fadd_rn(ToFloat(x[i]), ToFloat(residual[i]));
}

__device__ __forceinline__ float Term(float h, float inv_h) {
  return __fmul_rn(__fmul_rn(h, h), inv_h);
}

// +0 + terms[0] + ... + terms[n - 1], left to right. Each batch's shared-memory loads are issued before its adds, so
// lane 0's chain runs at the add's latency, not the load's (same order, same bits; at hidden 4096 one row took
// ~50 us with a load before every add).
__device__ __forceinline__ float SumInOrder(const float* terms, int n) {
  constexpr int kBatch = 32;
  float acc = 0.0f;
  int k = 0;
  for (; k + kBatch <= n; k += kBatch) {
    float t[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) t[i] = terms[k + i];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) acc = __fadd_rn(acc, t[i]);
  }
  for (; k < n; ++k) acc = __fadd_rn(acc, terms[k]);
  return acc;
}

// staged: the block's dynamic shared memory holds warps_per_block rows of terms; else nullptr.
// T = float or __nv_bfloat16 (the stored element type; the arithmetic is float32 either way).
template <typename T>
__global__ void FusedRmsNormKernel(const T* __restrict__ x, const T* __restrict__ weight,
                                   const T* __restrict__ residual, T* __restrict__ out,
                                   T* __restrict__ residual_out, int rows, int hidden,
                                   float inv_h, float eps, bool staged) {
  extern __shared__ float terms_all[];
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + warp;
  if (row >= rows) return;  // whole warps leave together
  const int64_t base = static_cast<int64_t>(row) * hidden;
  float* terms = staged ? terms_all + static_cast<int64_t>(warp) * hidden : nullptr;

  for (int k = lane; k < hidden; k += kWarpSize) {
    const float h = LoadH(x, residual, base + k);
    if (residual_out != nullptr) residual_out[base + k] = FromFloat<T>(h);
    if (terms != nullptr) terms[k] = Term(h, inv_h);
  }
  __syncwarp();
  float rs = 0.0f;
  if (lane == 0) {
    float acc = 0.0f;
    if (terms != nullptr) {
      acc = SumInOrder(terms, hidden);
    } else {
      for (int k = 0; k < hidden; ++k) acc = __fadd_rn(acc, Term(LoadH(x, residual, base + k), inv_h));
    }
    rs = __fsqrt_rn(__fadd_rn(acc, eps));
  }
  rs = __shfl_sync(0xffffffffu, rs, 0);
  for (int k = lane; k < hidden; k += kWarpSize) {
    const float h = LoadH(x, residual, base + k);
    out[base + k] = FromFloat<T>(__fmul_rn(__fdiv_rn(h, rs), ToFloat(weight[k])));
  }
}

template <typename T>
int Launch(const T* x, const T* weight, const T* residual, T* out, T* residual_out, int rows, int hidden, float eps,
           cudaStream_t stream) {
  // A zero-size tensor may have no storage (a NULL pointer), so pointers are checked only when rows > 0.
  const bool bad = rows < 0 || hidden < 1 || !(eps >= 0.0f) ||
                   (rows > 0 && (x == nullptr || weight == nullptr || out == nullptr ||
                                 (residual == nullptr) != (residual_out == nullptr)));
  if (bad) return static_cast<int>(cudaErrorInvalidValue);
  if (rows == 0) return static_cast<int>(cudaSuccess);
  // As many rows per block as fit the staging limit (kWarps, or 1 for wide rows, or unstaged).
  const int64_t row_bytes = static_cast<int64_t>(hidden) * 4;
  const int warps = row_bytes * kWarps <= kMaxStagedBytes ? kWarps : 1;
  const bool staged = hidden <= kMaxStaged;
  const size_t smem = staged ? static_cast<size_t>(row_bytes) * warps : 0;
  const int blocks = (rows + warps - 1) / warps;
  const float inv_h = 1.0f / static_cast<float>(hidden);  // host IEEE division: fl(1 / hidden)
  FusedRmsNormKernel<T><<<blocks, warps * kWarpSize, smem, stream>>>(
      x, weight, residual, out, residual_out, rows, hidden, inv_h, eps, staged);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

extern "C" int specworker_fused_rms_norm_launch(const float* x, const float* weight,
                                                const float* residual, float* out,
                                                float* residual_out, int rows, int hidden,
                                                float eps, cudaStream_t stream) {
  return Launch(x, weight, residual, out, residual_out, rows, hidden, eps, stream);
}

extern "C" int specworker_fused_rms_norm_bf16_launch(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                                     const __nv_bfloat16* residual, __nv_bfloat16* out,
                                                     __nv_bfloat16* residual_out, int rows, int hidden, float eps,
                                                     cudaStream_t stream) {
  return Launch(x, weight, residual, out, residual_out, rows, hidden, eps, stream);
}
