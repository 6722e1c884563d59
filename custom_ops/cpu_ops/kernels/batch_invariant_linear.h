// Framework-neutral CPU kernel of batch_invariant_linear (see batch_invariant_linear.cc here and
// cpu_ops/batch_invariant_linear.cc, the Paddle binding). No Paddle header: benchmarks load it with
// ctypes from the built library.
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Weight layouts. N = out_features, K = in_features; PANEL = 32 columns.
enum {
  SPECWORKER_LINEAR_PLAIN_F32 = 0,   // float    [K, N] row-major (paddle.nn.Linear.weight)
  SPECWORKER_LINEAR_PANELS_F32 = 1,  // float    [N / 32, K, 32]: panel p, row k = weight[k, 32p : 32p + 32]
  SPECWORKER_LINEAR_PANELS_BF16 = 2  // bfloat16 [N / 32, K, 32] (raw uint16 bits), widened exactly to float32;
                                     // in a panel row, element 2j = column j, element 2j + 1 = column j + 16
};
#define SPECWORKER_LINEAR_PANEL 32

// out[r, n] = x[r, :] @ weight[:, n] (+ bias[n]) in the fixed order of the op's contract:
//   acc = +0.0f; for k = 0 .. K-1: acc = fl(acc + fl(x[r, k] * w[k, n])); out = bias ? fl(acc + bias[n]) : acc
// where w[k, n] is the float32 weight (a bfloat16 weight widened exactly). x [M, K], bias [N] or NULL,
// out [M, N]: float32 row-major. The bits of every output depend on nothing but its row of x, its
// column of weight, its bias and K: not on M, the row's position, the layout, the instruction set or
// the thread count. Panel layouts need N % 32 == 0. Uses up to `max_threads` threads of the op's pool
// (0 = the pool's size, SPECWORKER_LINEAR_THREADS). Returns 0, or -1 with a message in
// specworker_linear_cpu_error() (an unusable SPECWORKER_LINEAR_CPU_ISA / _THREADS, a bad layout or size).
int specworker_batch_invariant_linear_cpu(const float* x, const void* weight, int layout, const float* bias,
                                          float* out, int64_t M, int64_t K, int64_t N, int max_threads);

// The message of the last failure (thread-local), and the code path in use: "avx512", "avx2" or
// "generic" (NULL when SPECWORKER_LINEAR_CPU_ISA names one this CPU lacks or is unknown).
const char* specworker_linear_cpu_error(void);
const char* specworker_linear_cpu_isa(void);
// Threads of the pool (SPECWORKER_LINEAR_THREADS, default: the CPUs this process may use, at most 8);
// -1 when the variable is unusable.
int specworker_linear_cpu_threads(void);

#ifdef __cplusplus
}
#endif
