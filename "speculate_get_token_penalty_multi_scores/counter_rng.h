// counter_rng.h: counter-based random numbers and exact inverse-CDF arithmetic, shared by the
// CPU kernels (g++), the CUDA kernels (nvcc) and, reimplemented from this comment, the numpy
// references. Framework-neutral and header-only; no state, no allocation.
//
// Uniform draws. A draw is a pure function of a counter tuple, so a seeded slot's randomness
// depends neither on its neighbours nor on its row, and nothing is carried between calls:
//   mix64(z):  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;  z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
//              return z ^ (z >> 31)                                  (splitmix64's finaliser)
//   bits(seed, step, row, draw):
//     h = mix64(seed + 0x9E3779B97F4A7C15); h = mix64(h ^ step); h = mix64(h ^ (row << 32 | draw))
//     return h >> 40                                                 (24 random bits)
//   uniform(bits) = (2 * bits + 1) / 2^25 = (bits + 0.5) / 2^24, a double in (0, 1), exact.
// All arithmetic is mod 2^64; seed and step are int64 reinterpreted as uint64 (two's complement),
// row and draw are uint32.
//
// Probability units. A float32 probability x counts as an integer number of 2^-40 units:
//   units(x) = 0 if !(x > 0) (also NaN);  2^40 if x >= 1;  else floor(x * 2^40)
// (x * 2^40 is a power-of-two scaling, exact in float). Sums of units are exact uint64 for up to
// 2^24 entries, so they do not depend on the summation order: a sequential CPU loop, a CUDA block
// scan and numpy's cumsum give the same bits. Probabilities below 2^-40 count as zero.
//
// Inverse CDF. For weights w (units) with total T > 0 the threshold is
//   t = floor(uniform * T) = ((2 * bits + 1) * T) >> 25          (exact 128-bit product)
// so 0 <= t < T always, and the sampled index is the smallest i with w[0] + ... + w[i] > t; that
// entry has w[i] > 0. No rounding can push the draw past the last id with nonzero mass.
//
// Accept test (speculative sampling). Accept a draft with probability min(1, p / q):
//   accept = q > 0 && uniform * q < p          (double; exact since uniform has 25 significant bits)
#pragma once

#include <stdint.h>

#if defined(__CUDACC__)
#define SPECWORKER_HD __host__ __device__ __forceinline__
#else
#define SPECWORKER_HD inline
#endif

namespace specworker {
namespace rng {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kProbOne = 1ull << 40;    // units(1.0)
constexpr int64_t kMaxCdfEntries = 1 << 24;  // keeps a sum of units below 2^64

SPECWORKER_HD uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// 24 random bits for the counter tuple (seed, step, row, draw).
SPECWORKER_HD uint32_t CounterBits(int64_t seed, int64_t step, uint32_t row, uint32_t draw) {
  uint64_t h = Mix64(static_cast<uint64_t>(seed) + kGolden);
  h = Mix64(h ^ static_cast<uint64_t>(step));
  h = Mix64(h ^ ((static_cast<uint64_t>(row) << 32) | draw));
  return static_cast<uint32_t>(h >> 40);
}

// (bits + 0.5) / 2^24 in (0, 1), exact in double.
SPECWORKER_HD double Uniform(uint32_t bits) {
  return static_cast<double>(2ull * bits + 1ull) * 0x1p-25;
}

// A float32 probability in units of 2^-40 (see the header comment).
SPECWORKER_HD uint64_t ProbUnits(float x) {
  if (!(x > 0.0f)) return 0;
  if (x >= 1.0f) return kProbOne;
  return static_cast<uint64_t>(x * 1099511627776.0f);  // x * 2^40 is exact; the cast truncates
}

// floor(uniform(bits) * total): the inverse-CDF threshold, 0 <= t < total when total > 0.
SPECWORKER_HD uint64_t ScaleToMass(uint32_t bits, uint64_t total) {
  const uint64_t a = 2ull * bits + 1ull;  // < 2^25
#if defined(__CUDA_ARCH__)
  const uint64_t lo = a * total;
  const uint64_t hi = __umul64hi(a, total);
#else
  const unsigned __int128 prod = static_cast<unsigned __int128>(a) * total;
  const uint64_t lo = static_cast<uint64_t>(prod);
  const uint64_t hi = static_cast<uint64_t>(prod >> 64);
#endif
  return (hi << 39) | (lo >> 25);
}

// Speculative-sampling accept test: true with probability min(1, p / q); q <= 0 (or NaN) rejects.
SPECWORKER_HD bool AcceptDraft(uint32_t bits, float p, float q) {
  if (!(q > 0.0f)) return false;
  const double u = Uniform(bits);
#if defined(__CUDA_ARCH__)
  return __dmul_rn(u, static_cast<double>(q)) < static_cast<double>(p);
#else
  return u * static_cast<double>(q) < static_cast<double>(p);
#endif
}

}  // namespace rng
}  // namespace specworker
