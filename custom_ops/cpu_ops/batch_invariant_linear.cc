// batch_invariant_linear: out = x @ weight (+ bias), with each output's float32 reduction order
// fixed by K alone, so a row's result is bit-identical whatever the other rows of the call are.
//   x       [M, K] float32, M >= 0 (packed token rows)
//   weight  [K, N] float32 (in_features x out_features: paddle.nn.Linear's weight layout, the
//           same argument as paddle.nn.functional.linear; a checkpoint's [N, K] matrix is
//           transposed once at load)
//   bias    [N] float32, optional
//   -> out  [M, N] float32
//
// Why: speculative decoding is lossless only if the target's logits for a token do not depend on
// how many tokens share the forward pass (1 on a plain decode step, k + 1 on a verify step).
// A BLAS picks its blocking, and so its summation order, from M; here that order is a contract:
//
//   acc = +0.0f
//   for k = 0, 1, ..., K - 1:  acc = fl(acc + fl(x[r, k] * weight[k, n]))    (no fused multiply-add)
//   out[r, n] = bias ? fl(acc + bias[n]) : acc
//
// i.e. a plain left-to-right float32 sum of correctly rounded products, one rounding per
// operation. Every code path below performs exactly this sequence of IEEE operations for every
// output; they differ only in which outputs they compute side by side (SIMD lanes run across
// columns n, never across k), so the bits cannot depend on M, on the row's position, on the
// tile a row lands in or on the instruction set. The CUDA kernel follows the same contract
// (__fmul_rn / __fadd_rn), so GPU and CPU agree bit for bit on normal numbers.
// To keep the compiler from fusing or reassociating: no -ffast-math (an #error below), and
// floating-point contraction is switched off for this file (GCC pragma; the STDC pragma for Clang).
//
// CPU paths, picked once per process from the CPU's features: AVX-512F (tiles of 4 rows x 64
// columns), AVX2 (4 rows x 24 columns, leftover columns scalar), generic (one row x 64 columns of
// plain loops the compiler may vectorize across columns). All give the same bits; the environment
// variable SPECWORKER_LINEAR_CPU_ISA=avx512|avx2|generic forces one (tests use it to compare them).
// Single-threaded: the caller's threads stay free, and nothing depends on a thread count.
//
// Errors: dtype, rank, K mismatch and bias shape raise on both devices. No input value is used as
// an index, so there is nothing to bound-check on either device (NaN and Inf propagate as IEEE).
#include <cstdlib>
#include <cstring>
#include <string>

#include "op_checks.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SPECWORKER_LINEAR_X86 1
#endif

#if defined(__FAST_MATH__)
#error "batch_invariant_linear.cc must not be compiled with -ffast-math: it would reassociate the sums"
#endif
// After every include, so only the kernels below are affected.
#pragma GCC optimize("fp-contract=off")
#pragma STDC FP_CONTRACT OFF

#ifdef SPECWORKER_WITH_CUDA
std::vector<paddle::Tensor> BatchInvariantLinearCUDA(const paddle::Tensor& x,
                                                     const paddle::Tensor& weight,
                                                     const paddle::optional<paddle::Tensor>& bias);
#endif

namespace {

constexpr const char* kOp = "batch_invariant_linear";

// ---------------------------------------------------------------------------------------------
// Generic path: one row at a time, kGenericCols accumulators across columns.
constexpr int kGenericCols = 64;

void LinearGeneric(const float* x, const float* w, const float* bias, float* out, int64_t M,
                   int64_t K, int64_t N) {
  float acc[kGenericCols];
  for (int64_t r = 0; r < M; ++r) {
    const float* xr = x + r * K;
    for (int64_t n0 = 0; n0 < N; n0 += kGenericCols) {
      const int cols = static_cast<int>(N - n0 < kGenericCols ? N - n0 : kGenericCols);
      for (int j = 0; j < cols; ++j) acc[j] = 0.0f;
      const float* wk = w + n0;
      for (int64_t k = 0; k < K; ++k, wk += N) {
        const float xv = xr[k];
        for (int j = 0; j < cols; ++j) {
          const float p = xv * wk[j];  // separate statements: one rounding each
          acc[j] = acc[j] + p;
        }
      }
      float* o = out + r * N + n0;
      for (int j = 0; j < cols; ++j) o[j] = bias ? acc[j] + bias[n0 + j] : acc[j];
    }
  }
}

#ifdef SPECWORKER_LINEAR_X86
// ---------------------------------------------------------------------------------------------
// AVX-512 path: R rows x NV vectors of 16 columns; the last vector of a tile may be masked.
// The unroll pragmas keep acc[][] in registers (without them GCC spills it every k).
template <int R, int NV>
__attribute__((target("avx512f"))) void TileAvx512(const float* x, const float* w,
                                                   const float* bias, float* out, int64_t K,
                                                   int64_t N, int64_t n0, __mmask16 last) {
  __m512 acc[R][NV];
  _Pragma("GCC unroll 4") for (int i = 0; i < R; ++i)
    _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  const float* wk = w + n0;
  for (int64_t k = 0; k < K; ++k, wk += N) {
    __m512 wv[NV];
    _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) {
      wv[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(last, wk + 16 * v) : _mm512_loadu_ps(wk + 16 * v);
    }
    _Pragma("GCC unroll 4") for (int i = 0; i < R; ++i) {
      const __m512 xb = _mm512_set1_ps(x[i * K + k]);
      _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) {
        acc[i][v] = _mm512_add_ps(acc[i][v], _mm512_mul_ps(xb, wv[v]));
      }
    }
  }
  _Pragma("GCC unroll 4") for (int i = 0; i < R; ++i) {
    _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) {
      const __mmask16 m = v == NV - 1 ? last : static_cast<__mmask16>(0xFFFF);
      __m512 o = acc[i][v];
      if (bias) o = _mm512_add_ps(o, _mm512_maskz_loadu_ps(m, bias + n0 + 16 * v));
      _mm512_mask_storeu_ps(out + i * N + n0 + 16 * v, m, o);
    }
  }
}

template <int R>
__attribute__((target("avx512f"))) void RowsAvx512(const float* x, const float* w,
                                                   const float* bias, float* out, int64_t K,
                                                   int64_t N) {
  int64_t n0 = 0;
  for (; n0 + 64 <= N; n0 += 64) TileAvx512<R, 4>(x, w, bias, out, K, N, n0, 0xFFFF);
  const int64_t rest = N - n0;
  if (rest == 0) return;
  const int nv = static_cast<int>((rest + 15) / 16);
  const int tail = static_cast<int>(rest - 16 * (nv - 1));  // 1..16 columns in the last vector
  const __mmask16 last = static_cast<__mmask16>((1u << tail) - 1u);
  switch (nv) {
    case 1: TileAvx512<R, 1>(x, w, bias, out, K, N, n0, last); break;
    case 2: TileAvx512<R, 2>(x, w, bias, out, K, N, n0, last); break;
    case 3: TileAvx512<R, 3>(x, w, bias, out, K, N, n0, last); break;
    default: TileAvx512<R, 4>(x, w, bias, out, K, N, n0, last); break;
  }
}

__attribute__((target("avx512f"))) void LinearAvx512(const float* x, const float* w,
                                                     const float* bias, float* out, int64_t M,
                                                     int64_t K, int64_t N) {
  int64_t r = 0;
  for (; r + 4 <= M; r += 4) RowsAvx512<4>(x + r * K, w, bias, out + r * N, K, N);
  switch (M - r) {
    case 1: RowsAvx512<1>(x + r * K, w, bias, out + r * N, K, N); break;
    case 2: RowsAvx512<2>(x + r * K, w, bias, out + r * N, K, N); break;
    case 3: RowsAvx512<3>(x + r * K, w, bias, out + r * N, K, N); break;
    default: break;
  }
}

// ---------------------------------------------------------------------------------------------
// AVX2 path: R rows x NV vectors of 8 columns (12 accumulators + 3 weights + 1 broadcast = the
// 16 ymm registers); the last N % 8 columns take the scalar loop.
template <int R, int NV>
__attribute__((target("avx2"))) void TileAvx2(const float* x, const float* w, const float* bias,
                                              float* out, int64_t K, int64_t N, int64_t n0) {
  __m256 acc[R][NV];
  _Pragma("GCC unroll 4") for (int i = 0; i < R; ++i)
    _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_setzero_ps();
  const float* wk = w + n0;
  for (int64_t k = 0; k < K; ++k, wk += N) {
    __m256 wv[NV];
    _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) wv[v] = _mm256_loadu_ps(wk + 8 * v);
    _Pragma("GCC unroll 4") for (int i = 0; i < R; ++i) {
      const __m256 xb = _mm256_broadcast_ss(x + i * K + k);
      _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) {
        acc[i][v] = _mm256_add_ps(acc[i][v], _mm256_mul_ps(xb, wv[v]));
      }
    }
  }
  _Pragma("GCC unroll 4") for (int i = 0; i < R; ++i) {
    _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) {
      __m256 o = acc[i][v];
      if (bias) o = _mm256_add_ps(o, _mm256_loadu_ps(bias + n0 + 8 * v));
      _mm256_storeu_ps(out + i * N + n0 + 8 * v, o);
    }
  }
}

template <int R>
__attribute__((target("avx2"))) void RowsAvx2(const float* x, const float* w, const float* bias,
                                              float* out, int64_t K, int64_t N) {
  int64_t n0 = 0;
  for (; n0 + 24 <= N; n0 += 24) TileAvx2<R, 3>(x, w, bias, out, K, N, n0);
  if (N - n0 >= 16) {
    TileAvx2<R, 2>(x, w, bias, out, K, N, n0);
    n0 += 16;
  }
  if (N - n0 >= 8) {
    TileAvx2<R, 1>(x, w, bias, out, K, N, n0);
    n0 += 8;
  }
  for (int i = 0; i < R; ++i) {
    for (int64_t n = n0; n < N; ++n) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        const float p = x[i * K + k] * w[k * N + n];
        acc = acc + p;
      }
      out[i * N + n] = bias ? acc + bias[n] : acc;
    }
  }
}

__attribute__((target("avx2"))) void LinearAvx2(const float* x, const float* w, const float* bias,
                                                float* out, int64_t M, int64_t K, int64_t N) {
  int64_t r = 0;
  for (; r + 4 <= M; r += 4) RowsAvx2<4>(x + r * K, w, bias, out + r * N, K, N);
  switch (M - r) {
    case 1: RowsAvx2<1>(x + r * K, w, bias, out + r * N, K, N); break;
    case 2: RowsAvx2<2>(x + r * K, w, bias, out + r * N, K, N); break;
    case 3: RowsAvx2<3>(x + r * K, w, bias, out + r * N, K, N); break;
    default: break;
  }
}
#endif  // SPECWORKER_LINEAR_X86

// ---------------------------------------------------------------------------------------------
using LinearFn = void (*)(const float*, const float*, const float*, float*, int64_t, int64_t,
                          int64_t);

struct CpuPath {
  LinearFn fn = nullptr;
  std::string error;  // set when SPECWORKER_LINEAR_CPU_ISA asks for something unavailable
};

CpuPath PickCpuPath() {
  const char* env = std::getenv("SPECWORKER_LINEAR_CPU_ISA");
  const std::string want = env && *env ? env : "auto";
  bool avx512 = false, avx2 = false;
#ifdef SPECWORKER_LINEAR_X86
  avx512 = __builtin_cpu_supports("avx512f");
  avx2 = __builtin_cpu_supports("avx2");
#endif
  CpuPath p;
  if (want == "generic") {
    p.fn = LinearGeneric;
  } else if (want == "avx2" || want == "avx512") {
    const bool have = want == "avx2" ? avx2 : avx512;
    if (!have) {
      p.error = "SPECWORKER_LINEAR_CPU_ISA=" + want + " but this CPU does not support it";
      return p;
    }
#ifdef SPECWORKER_LINEAR_X86
    p.fn = want == "avx2" ? LinearAvx2 : LinearAvx512;
#endif
  } else if (want == "auto") {
#ifdef SPECWORKER_LINEAR_X86
    p.fn = avx512 ? LinearAvx512 : (avx2 ? LinearAvx2 : LinearGeneric);
#else
    p.fn = LinearGeneric;
#endif
  } else {
    p.error = "SPECWORKER_LINEAR_CPU_ISA=" + want + ", expected auto, avx512, avx2 or generic";
  }
  return p;
}

const CpuPath& SelectedCpuPath() {
  static const CpuPath path = PickCpuPath();  // once per process
  return path;
}

void CheckArgs(const paddle::Tensor& x, const paddle::Tensor& weight,
               const paddle::optional<paddle::Tensor>& bias) {
  using paddle::DataType;
  specworker::CheckDtype(kOp, "x", x, DataType::FLOAT32);
  specworker::CheckRank(kOp, "x", x, 2);
  specworker::CheckDtype(kOp, "weight", weight, DataType::FLOAT32);
  specworker::CheckRank(kOp, "weight", weight, 2);
  const int64_t K = x.shape()[1];
  PD_CHECK(weight.shape()[0] == K, kOp, ": weight has shape ", specworker::ShapeStr(weight.shape()),
           ", expected [K, N] with K = x.shape[1] = ", K, " (x has shape ",
           specworker::ShapeStr(x.shape()), "; weight is [in_features, out_features])");
  const int64_t N = weight.shape()[1];
  specworker::CheckSamePlace(kOp, "weight", weight, x, "x");
  if (bias) {
    specworker::CheckDtype(kOp, "bias", *bias, DataType::FLOAT32);
    PD_CHECK(bias->shape().size() == 1 && bias->shape()[0] == N, kOp, ": bias has shape ",
             specworker::ShapeStr(bias->shape()), ", expected [N] = [", N, "]");
    specworker::CheckSamePlace(kOp, "bias", *bias, x, "x");
  }
  // The CUDA launcher takes int sizes; the same limits on CPU keep the two devices alike.
  specworker::CheckFitsInt32(kOp, "M (x.shape[0])", x.shape()[0]);
  specworker::CheckFitsInt32(kOp, "K (x.shape[1])", K);
  specworker::CheckFitsInt32(kOp, "N (weight.shape[1])", N);
}

std::vector<paddle::Tensor> BatchInvariantLinearCPU(const paddle::Tensor& x,
                                                    const paddle::Tensor& weight,
                                                    const paddle::optional<paddle::Tensor>& bias) {
  const int64_t M = x.shape()[0];
  const int64_t K = x.shape()[1];
  const int64_t N = weight.shape()[1];
  const CpuPath& path = SelectedCpuPath();
  PD_CHECK(path.fn != nullptr, kOp, ": ", path.error);
  auto out = paddle::empty({M, N}, paddle::DataType::FLOAT32, x.place());
  if (M == 0 || N == 0) return {out};
  // With K == 0, x and weight may hold no memory (every output is then +0 or the bias).
  const float* x_ptr = K > 0 ? x.data<float>() : nullptr;
  const float* w_ptr = K > 0 ? weight.data<float>() : nullptr;
  path.fn(x_ptr, w_ptr, bias ? bias->data<float>() : nullptr, out.data<float>(), M, K, N);
  return {out};
}

}  // namespace

std::vector<paddle::Tensor> BatchInvariantLinear(const paddle::Tensor& x,
                                                 const paddle::Tensor& weight,
                                                 const paddle::optional<paddle::Tensor>& bias) {
  specworker::CheckGiven(kOp, {{"x", &x}, {"weight", &weight}});
  CheckArgs(x, weight, bias);
  if (x.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    return BatchInvariantLinearCUDA(x, weight, bias);
#else
    PD_THROW(kOp, ": got a GPU tensor but the extension was built without CUDA");
#endif
  }
  return BatchInvariantLinearCPU(x, weight, bias);
}

std::vector<std::vector<int64_t>> BatchInvariantLinearInferShape(
    const std::vector<int64_t>& x, const std::vector<int64_t>& weight,
    const paddle::optional<std::vector<int64_t>>& /*bias*/) {
  return {{x[0], weight[1]}};
}

std::vector<paddle::DataType> BatchInvariantLinearInferDtype(
    const paddle::DataType&, const paddle::DataType&, const paddle::optional<paddle::DataType>&) {
  return {paddle::DataType::FLOAT32};
}

PD_BUILD_OP(batch_invariant_linear)
    .Inputs({"x", "weight", paddle::Optional("bias")})
    .Outputs({"out"})
    .SetKernelFn(PD_KERNEL(BatchInvariantLinear))
    .SetInferShapeFn(PD_INFER_SHAPE(BatchInvariantLinearInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(BatchInvariantLinearInferDtype));
