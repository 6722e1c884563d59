// qkv_norm_rotary CUDA kernel: the packed qkv projection -> rotated q, rotated k and v (docs/spec.md §4.11).
//   qkv [T, (nh + 2 nkv) * d] -> q [T, nh, d], k [T, nkv, d] (optional per-head RMSNorm, then rotary), v copied.
// Per q or k head y: with norms, acc = sum over k in order of fl(fl(y_k * y_k) * fl(1 / d)),
// r = sqrt(fl(acc + eps)), y_k = fl(fl(y_k / r) * w_k); then
// out_j = fl(fl(y_j * cos_full_j) + fl(y_{(j + d/2) mod d} * sin_signed_j)). Every operation is an
// explicitly rounded intrinsic (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn: nvcc cannot contract them
// into FMAs), in the order of the CPU op (cpu_ops/qkv_norm_rotary.cc), so the two agree bit for bit and a
// row's bits never depend on the other rows.
// bfloat16 variant (specworker_qkv_norm_rotary_bf16_launch): qkv, the norm weights and q, k, v bf16, the factors
// float32; the head widens exactly to float32 in shared memory, the arithmetic above runs unchanged in float32 (the
// normed y is not rounded before the rotation), and each output value is rounded to bf16 once; v is copied as is.
// One kernel template serves both.
// Parallelisation: one warp per (row, head) over all nh + 2 nkv heads of a row; kWarps warps per block.
// The warp stages its head in shared memory (coalesced), lane 0 runs the norm's sequential sum and
// broadcasts r, then the lanes write the outputs strided by 32. A v head is a coalesced copy.
#include "qkv_norm_rotary.h"

#include <math.h>
#include <stdint.h>

#include "dtype_convert.cuh"

namespace {

using specworker::FromFloat;
using specworker::ToFloat;

constexpr int kWarps = 4;
constexpr int kMaxHeadDim = 8192;  // kept equal to the CPU op's limit
constexpr int kSharedBudget = 48 * 1024;  // default dynamic shared memory per block

template <typename T>  // float or __nv_bfloat16: qkv, weights, q, k, v; the factors are float32 either way
struct Args {
  const T* qkv;
  const float* cos_full;
  const float* sin_signed;
  const T* q_norm_weight;  // nullptr: no norms
  const T* k_norm_weight;
  T* q;
  T* k;
  T* v;
  int64_t items;  // T * (nh + 2 nkv)
  int nh, nkv, d;
  float eps;
};

template <typename T>
__device__ __forceinline__ void NormRotateHead(float* y, const T* __restrict__ src,
                                               const float* __restrict__ cos_full,
                                               const float* __restrict__ sin_signed,
                                               const T* __restrict__ w, float eps, int d,
                                               T* __restrict__ dst) {
  const int lane = threadIdx.x % 32;
  for (int j = lane; j < d; j += 32) y[j] = ToFloat(src[j]);
  __syncwarp();
  if (w != nullptr) {
    float r = 0.0f;
    if (lane == 0) {
      const float inv_d = __fdiv_rn(1.0f, static_cast<float>(d));
      float acc = 0.0f;
      for (int k = 0; k < d; ++k) acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(y[k], y[k]), inv_d));
      r = __fsqrt_rn(__fadd_rn(acc, eps));
    }
    r = __shfl_sync(0xffffffffu, r, 0);
    for (int j = lane; j < d; j += 32) y[j] = __fmul_rn(__fdiv_rn(y[j], r), ToFloat(w[j]));
    __syncwarp();
  }
  const int half = d / 2;
  for (int j = lane; j < d; j += 32) {
    const int partner = j < half ? j + half : j - half;
    dst[j] = FromFloat<T>(__fadd_rn(__fmul_rn(y[j], cos_full[j]), __fmul_rn(y[partner], sin_signed[j])));
  }
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32) QkvNormRotaryKernel(Args<T> a) {
  extern __shared__ float staged[];  // [kWarps, d]
  const int warp = threadIdx.x / 32;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (item >= a.items) return;  // whole warps only: the shuffles and __syncwarp below see full warps
  const int heads = a.nh + 2 * a.nkv;
  const int64_t t = item / heads;
  const int h = static_cast<int>(item % heads);
  const int d = a.d;
  const T* src = a.qkv + item * d;  // row t, head h of the packed [T, heads * d]
  const float* cos_full = a.cos_full + t * d;
  const float* sin_signed = a.sin_signed + t * d;
  if (h < a.nh) {
    NormRotateHead(staged + warp * d, src, cos_full, sin_signed, a.q_norm_weight, a.eps, d,
                   a.q + (t * a.nh + h) * d);
  } else if (h < a.nh + a.nkv) {
    NormRotateHead(staged + warp * d, src, cos_full, sin_signed, a.k_norm_weight, a.eps, d,
                   a.k + (t * a.nkv + h - a.nh) * d);
  } else {
    T* dst = a.v + (t * a.nkv + h - a.nh - a.nkv) * d;
    for (int j = threadIdx.x % 32; j < d; j += 32) dst[j] = src[j];
  }
}

template <typename T>
int Launch(const T* qkv, const float* cos_full, const float* sin_signed, const T* q_norm_weight,
           const T* k_norm_weight, T* q, T* k, T* v, int T_num, int num_heads, int num_kv_heads, int head_dim,
           float eps, cudaStream_t stream) {
  const bool bad = T_num < 0 || num_heads < 1 || num_kv_heads < 1 || num_heads % num_kv_heads != 0 ||
                   head_dim < 2 || head_dim % 2 != 0 || head_dim > kMaxHeadDim || !isfinite(eps) || eps < 0.0f ||
                   (q_norm_weight == nullptr) != (k_norm_weight == nullptr);
  if (bad) return static_cast<int>(cudaErrorInvalidValue);
  if (T_num == 0) return static_cast<int>(cudaSuccess);
  if (qkv == nullptr || cos_full == nullptr || sin_signed == nullptr || q == nullptr || k == nullptr ||
      v == nullptr) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const int64_t heads = static_cast<int64_t>(num_heads) + 2 * static_cast<int64_t>(num_kv_heads);
  const Args<T> a{qkv, cos_full, sin_signed, q_norm_weight, k_norm_weight, q, k, v,
                  static_cast<int64_t>(T_num) * heads, num_heads, num_kv_heads, head_dim, eps};
  const int64_t blocks = (a.items + kWarps - 1) / kWarps;
  if (blocks > INT32_MAX) return static_cast<int>(cudaErrorInvalidValue);
  const size_t shared = sizeof(float) * kWarps * static_cast<size_t>(head_dim);
  if (shared > kSharedBudget) {
    const cudaError_t err = cudaFuncSetAttribute(QkvNormRotaryKernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(shared));
    if (err != cudaSuccess) return static_cast<int>(err);
  }
  QkvNormRotaryKernel<T><<<static_cast<unsigned>(blocks), kWarps * 32, shared, stream>>>(a);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

extern "C" int specworker_qkv_norm_rotary_launch(const float* qkv, const float* cos_full, const float* sin_signed,
                                                 const float* q_norm_weight, const float* k_norm_weight, float* q,
                                                 float* k, float* v, int T, int num_heads, int num_kv_heads,
                                                 int head_dim, float eps, cudaStream_t stream) {
  return Launch(qkv, cos_full, sin_signed, q_norm_weight, k_norm_weight, q, k, v, T, num_heads, num_kv_heads,
                head_dim, eps, stream);
}

extern "C" int specworker_qkv_norm_rotary_bf16_launch(const __nv_bfloat16* qkv, const float* cos_full,
                                                      const float* sin_signed, const __nv_bfloat16* q_norm_weight,
                                                      const __nv_bfloat16* k_norm_weight, __nv_bfloat16* q,
                                                      __nv_bfloat16* k, __nv_bfloat16* v, int T, int num_heads,
                                                      int num_kv_heads, int head_dim, float eps,
                                                      cudaStream_t stream) {
  return Launch(qkv, cos_full, sin_signed, q_norm_weight, k_norm_weight, q, k, v, T, num_heads, num_kv_heads,
                head_dim, eps, stream);
}
