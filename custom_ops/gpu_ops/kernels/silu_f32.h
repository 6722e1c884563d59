// silu_f32.h: the project's float32 silu (docs/spec.md §4.12), one definition shared by the CPU op (g++,
// cpu_ops/fused_swiglu.cc) and the CUDA kernels (nvcc, kernels/fused_swiglu.cu); the numpy reference reimplements it
// from the spec. Paddle's CPU exp and CUDA's expf are different approximations, so silu is built from IEEE float32 adds,
// multiplies and one divide, each rounded once, and gives the same bits on every device:
//   g NaN -> NaN. gc = max(g, -112); x = max(-gc, -64)             (silu(g <= -112) rounds to -0)
//   n = rint(fl(x * LOG2E))                                        (round half to even, an integer in [-92, 162])
//   r = fl(fl(x - fl(n * LN2_HI)) - fl(n * LN2_LO))                (n * LN2_HI and the first difference are exact)
//   p = fl(fl(fl(P(r) * fl(r * r)) + r) + 1), P in Horner form     (e^r on |r| <= 0.35; e^x = p * 2^n)
//   k = -n; d = fl(p + 2^k); v = fl(gc / d); silu = fl(v * 2^k)    (= gc / (1 + p * 2^n), never overflowing)
// 2^k is formed as 2^k1 * 2^k2 (k1 = k / 2 truncated, k2 = k - k1, both normal floats): fl(2^k1 * 2^k2) is 2^k, or
// a value below half an ulp of p when 2^k is below float32's range, and v * 2^k1 is exact, so the last multiply
// rounds once. Framework-neutral and header-only; no state.
#pragma once

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define SPECWORKER_SILU_HD __host__ __device__ __forceinline__
#else
#define SPECWORKER_SILU_HD inline
#if defined(__FAST_MATH__)
#error "silu_f32.h must not be compiled with -ffast-math: it would contract and reorder the rounded steps"
#endif
// No FMA and no reassociation in the host copy (the device copy uses the _rn intrinsics).
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif

namespace specworker {
namespace silu {

constexpr float kGMin = -112.0f;  // numerator floor
constexpr float kXMin = -64.0f;   // exp argument floor: fl(1 + e^x) = 1 below it
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;     // 355 / 512: n * kLn2Hi is exact for |n| < 2^15
constexpr float kLn2Lo = -2.12194440e-4f;  // ln 2 - kLn2Hi
constexpr float kRint = 12582912.0f;       // 1.5 * 2^23: fl(fl(y + kRint) - kRint) = rint(y) for |y| <= 2^22
// e^r = 1 + r + r^2 * P(r), P(r) = ((((kP0 r + kP1) r + kP2) r + kP3) r + kP4) r + kP5 (Cephes' expf)
constexpr float kP0 = 1.9875691500e-4f;
constexpr float kP1 = 1.3981999507e-3f;
constexpr float kP2 = 8.3334519073e-3f;
constexpr float kP3 = 4.1665795894e-2f;
constexpr float kP4 = 1.6666665459e-1f;
constexpr float kP5 = 5.0000001201e-1f;

SPECWORKER_SILU_HD float Add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

SPECWORKER_SILU_HD float Sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

SPECWORKER_SILU_HD float Mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

SPECWORKER_SILU_HD float Div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// The bits of one 4-byte type as another (memcpy: defined behaviour; compilers emit a register move).
template <typename To, typename From>
SPECWORKER_SILU_HD To BitCast(From from) {
  static_assert(sizeof(To) == sizeof(From), "BitCast reinterprets values of one size");
  To to;
  memcpy(&to, &from, sizeof to);
  return to;
}

// 2^k for -126 <= k <= 127 (a normal float), from its bits; other k give some float (never undefined behaviour).
SPECWORKER_SILU_HD float Pow2(int32_t k) {
  return BitCast<float>(static_cast<uint32_t>(k + 127) << 23);
}

// silu(g) in the order of the header comment. Finite g never makes an Inf or NaN; +Inf gives +Inf, -Inf -0. A NaN
// g runs through unchanged (every comparison below is false for it) and makes the result NaN; its integer n is
// then garbage but defined, and unused. No branch, so the CPU loop vectorises.
SPECWORKER_SILU_HD float SiluF32(float g) {
  const float gc = g < kGMin ? kGMin : g;
  const float x = -gc < kXMin ? kXMin : -gc;
  const float shifted = Add(Mul(x, kLog2e), kRint);  // kRint + n exactly: |x * LOG2E| <= 162
  const float n = Sub(shifted, kRint);
  const float r = Sub(Sub(x, Mul(n, kLn2Hi)), Mul(n, kLn2Lo));
  float poly = kP0;
  poly = Add(Mul(poly, r), kP1);
  poly = Add(Mul(poly, r), kP2);
  poly = Add(Mul(poly, r), kP3);
  poly = Add(Mul(poly, r), kP4);
  poly = Add(Mul(poly, r), kP5);
  const float p = Add(Add(Mul(poly, Mul(r, r)), r), 1.0f);
  // k = -n from shifted's low bits (no float-to-int conversion); in [-162, 92]
  const int32_t k = static_cast<int32_t>(BitCast<uint32_t>(kRint) - BitCast<uint32_t>(shifted));
  const int32_t k1 = k / 2;
  const float s1 = Pow2(k1);
  const float s2 = Pow2(k - k1);
  const float d = Add(p, Mul(s1, s2));
  return Mul(Mul(Div(gc, d), s1), s2);
}

}  // namespace silu
}  // namespace specworker

#if !defined(__CUDACC__)
#pragma GCC pop_options
#endif
