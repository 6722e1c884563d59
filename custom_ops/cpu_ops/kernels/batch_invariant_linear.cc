// batch_invariant_linear's CPU kernel: out = x @ weight (+ bias) with every output's float32 order
// fixed by K alone (contract in batch_invariant_linear.h):
//
//   acc = +0.0f
//   for k = 0, 1, ..., K - 1:  acc = fl(acc + fl(x[r, k] * w[k, n]))    (no fused multiply-add)
//   out[r, n] = bias ? fl(acc + bias[n]) : acc
//
// Every code path performs exactly this sequence of IEEE operations for every output; they differ
// only in which outputs they compute side by side. SIMD lanes run across columns n, never across k,
// and a thread owns whole outputs (a unit of work is a block of columns x a block of rows, with its
// whole k loop), so the bits cannot depend on M, on a row's position, on the tiling, on the
// instruction set or on the thread count. No FMA: the CUDA kernel follows the same contract
// (__fmul_rn / __fadd_rn), so both devices give the same bits; on Zen 4 a vmulps + vaddps pair
// retires at the rate of one vfmadd231ps (separate multiply and add pipes; benchmarks/cpu_linear.py
// measures both), so the contract costs no peak throughput there.
//
// Layout of the work. Columns are cut into blocks of 64, rows into blocks of 16; one unit = one column
// block x one row block, units ordered column-block-major, handed out to the threads of the pool
// (thread_pool.h) one at a time.
// Inside a unit, register tiles of up to 4 rows x the block's columns (AVX-512: 4 x 4 zmm
// accumulators, 16 independent add chains) walk k once, so a column block's weights stream from
// memory once per call and from L2 once per 4 rows. Weights come in three layouts: plain [K, N]
// (stride N between k rows: software prefetch ahead), panels [N / 32, K, 32] float32 (one contiguous
// stream per 32 columns, software-prefetched kPanelPrefetchRows ahead) and the same panels in bfloat16
// (half the bytes) with columns j and j + 16 side by side: one 64-byte load holds 16 such pairs,
// and one shift (columns j) and one mask (columns j + 16) widen them to float32, exactly.
//
// CPU paths, picked once per process from the CPU's features: AVX-512F, AVX2, generic (plain loops
// the compiler may vectorise across columns). SPECWORKER_LINEAR_CPU_ISA=avx512|avx2|generic forces
// one, SPECWORKER_LINEAR_THREADS sets the pool size (thread_pool.h); tests compare them all.
#include "batch_invariant_linear.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "thread_pool.h"

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

namespace {

constexpr int kPanel = SPECWORKER_LINEAR_PANEL;
constexpr int kSlice = 16;     // columns per slice: one zmm, two ymm
constexpr int kMaxSlices = 4;  // a column block is at most 64 columns
constexpr int kTileRows = 4;
constexpr int64_t kRowBlock = 16;
constexpr int kPrefetchRows = 8;  // plain layout: prefetch the weight row this many k ahead
// Panels are one contiguous stream each, but the hardware prefetcher alone keeps too few lines in flight once
// a k step costs more than a line's worth of arithmetic (M = 2..4 rows: 8 to 16 vector ops per 128 bytes), so
// the tile prefetches this many k rows ahead itself (2 KB of a float32 panel). Measured side by side
// (2 threads, weights from DRAM): M = 4 at 576 x 3072 662 -> 434 us, 576 x 576 128 -> 81 us; M = 1 unchanged
// or slightly faster; distances 4-64 all help, 16 was best or within noise of it.
constexpr int kPanelPrefetchRows = 16;
// Below this much work a call runs on its caller's thread (waking a worker costs more).
constexpr int64_t kParallelWeightBytes = 256 * 1024;
constexpr int64_t kParallelMacs = int64_t{1} << 20;

thread_local std::string g_error;

// Where a column block's 16-column slices live: slice v holds w[k, n0 + 16 v + j] at
// base[v][k * stride + j] (plain: stride N; float32 panels: stride 32), or for bfloat16 panels at
// base[v][k * stride + 2 j + hi[v]] (base: the panel; hi: the slice holds the panel's columns 16..31).
template <typename WT>
struct Slices {
  const WT* base[kMaxSlices];
  int hi[kMaxSlices];
  int64_t stride;
};

constexpr int ElementStep(float) { return 1; }
constexpr int ElementStep(uint16_t) { return 2; }  // bfloat16 panels interleave column pairs

// A block of rows x up to 64 columns: x rows (stride K), out rows (stride ldo) and bias at column n0.
struct Block {
  const float* x;
  float* out;
  const float* bias;
  int64_t rows, K, ldo, cols;
};

inline float Widen(float w) { return w; }
inline float Widen(uint16_t bits) {  // bfloat16 -> float32, exact
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// ---------------------------------------------------------------------------------------------
// Generic path: one row at a time, one 16-column slice at a time.
template <typename WT>
void BlockGeneric(const Block& b, const Slices<WT>& s) {
  for (int64_t r = 0; r < b.rows; ++r) {
    const float* xr = b.x + r * b.K;
    for (int v = 0; v * kSlice < b.cols; ++v) {
      const int cols = static_cast<int>(b.cols - v * kSlice < kSlice ? b.cols - v * kSlice : kSlice);
      float acc[kSlice];
      for (int j = 0; j < kSlice; ++j) acc[j] = 0.0f;
      constexpr int step = ElementStep(WT{});
      const WT* wk = s.base[v] + s.hi[v];
      for (int64_t k = 0; k < b.K; ++k, wk += s.stride) {
        const float xv = xr[k];
        for (int j = 0; j < cols; ++j) {
          const float p = xv * Widen(wk[step * j]);  // separate statements: one rounding each
          acc[j] = acc[j] + p;
        }
      }
      float* o = b.out + r * b.ldo + v * kSlice;
      for (int j = 0; j < cols; ++j) o[j] = b.bias ? acc[j] + b.bias[v * kSlice + j] : acc[j];
    }
  }
}

#ifdef SPECWORKER_LINEAR_X86
// ---------------------------------------------------------------------------------------------
// AVX-512 path: R rows x NV slices (one zmm each). kPlain: the [K, N] layout (the last slice may be
// masked, the next rows are prefetched); panels are always whole slices.
__attribute__((target("avx512f"))) inline __m512 LoadSlice512(const float* p, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, p);
}
__attribute__((target("avx512f"))) inline __m512 LoadSlice512(const float* p) { return _mm512_loadu_ps(p); }
// 16 bfloat16 column pairs (j, j + 16) -> columns 0..15 (low halves shifted up) and 16..31 (masked).
__attribute__((target("avx512f"))) inline void LoadPanel512(const uint16_t* p, __m512* lo, __m512* hi) {
  const __m512i pairs = _mm512_loadu_si512(p);
  *lo = _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
  *hi = _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// The unroll pragmas keep acc[][] in registers (without them GCC spills it every k).
template <int R, int NV, typename WT, bool kPlain>
__attribute__((target("avx512f"))) void TileAvx512(const float* x, int64_t K, const Slices<WT>& s,
                                                   const float* bias, float* out, int64_t ldo,
                                                   __mmask16 last_mask) {
  const __mmask16 last = kPlain ? last_mask : static_cast<__mmask16>(0xFFFF);
  __m512 acc[R][NV];
  _Pragma("GCC unroll 4") for (int i = 0; i < R; ++i)
    _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  const WT* base[NV];
  _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) base[v] = s.base[v];
  const int64_t stride = s.stride;
  int64_t off = 0;
  for (int64_t k = 0; k < K; ++k, off += stride) {
    if (kPlain) {
      _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) {
        _mm_prefetch(reinterpret_cast<const char*>(base[v] + off + kPrefetchRows * stride), _MM_HINT_T0);
      }
    } else {  // panels: one line per 16-column slice (float32) or per panel (bfloat16: both slices)
      constexpr int kStep = std::is_same_v<WT, uint16_t> ? 2 : 1;
      _Pragma("GCC unroll 4") for (int v = 0; v < NV; v += kStep) {
        _mm_prefetch(reinterpret_cast<const char*>(base[v] + off + kPanelPrefetchRows * stride), _MM_HINT_T0);
      }
    }
    __m512 wv[NV];
    if constexpr (std::is_same_v<WT, uint16_t>) {  // panels: NV is even, slices 2p and 2p + 1 share a load
      static_assert(NV % 2 == 0, "bfloat16 panels come in whole panels");
      _Pragma("GCC unroll 4") for (int v = 0; v < NV; v += 2) LoadPanel512(base[v] + off, &wv[v], &wv[v + 1]);
    } else {
      _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) {
        wv[v] = kPlain && v == NV - 1 ? LoadSlice512(base[v] + off, last) : LoadSlice512(base[v] + off);
      }
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
      if (bias) o = _mm512_add_ps(o, _mm512_maskz_loadu_ps(m, bias + kSlice * v));
      _mm512_mask_storeu_ps(out + i * ldo + kSlice * v, m, o);
    }
  }
}

template <int NV, typename WT, bool kPlain>
__attribute__((target("avx512f"))) void RowsAvx512(const Block& b, const Slices<WT>& s, __mmask16 last) {
  int64_t r = 0;
  for (; r + kTileRows <= b.rows; r += kTileRows) {
    TileAvx512<kTileRows, NV, WT, kPlain>(b.x + r * b.K, b.K, s, b.bias, b.out + r * b.ldo, b.ldo, last);
  }
  const float* x = b.x + r * b.K;
  float* out = b.out + r * b.ldo;
  switch (b.rows - r) {
    case 1: TileAvx512<1, NV, WT, kPlain>(x, b.K, s, b.bias, out, b.ldo, last); break;
    case 2: TileAvx512<2, NV, WT, kPlain>(x, b.K, s, b.bias, out, b.ldo, last); break;
    case 3: TileAvx512<3, NV, WT, kPlain>(x, b.K, s, b.bias, out, b.ldo, last); break;
    default: break;
  }
}

template <typename WT, bool kPlain>
__attribute__((target("avx512f"))) void BlockAvx512(const Block& b, const Slices<WT>& s) {
  const int nv = static_cast<int>((b.cols + kSlice - 1) / kSlice);
  const int tail = static_cast<int>(b.cols - kSlice * (nv - 1));  // 1..16 columns in the last slice
  const __mmask16 last = static_cast<__mmask16>((1u << tail) - 1u);
  if constexpr (std::is_same_v<WT, uint16_t>) {  // whole panels: 2 or 4 slices
    if (nv == 2) {
      RowsAvx512<2, WT, kPlain>(b, s, last);
    } else {
      RowsAvx512<4, WT, kPlain>(b, s, last);
    }
  } else {
    switch (nv) {
      case 1: RowsAvx512<1, WT, kPlain>(b, s, last); break;
      case 2: RowsAvx512<2, WT, kPlain>(b, s, last); break;
      case 3: RowsAvx512<3, WT, kPlain>(b, s, last); break;
      default: RowsAvx512<4, WT, kPlain>(b, s, last); break;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// AVX2 path: R rows x one 16-column slice (two ymm; 8 accumulators + 2 weights + 1 broadcast of
// the 16 ymm registers), slice after slice; a partial slice uses masked loads and stores.
// 8 columns: float32 at p (masked), or from the 8 bfloat16 column pairs at p (hi: the pairs' second
// columns, else their first).
__attribute__((target("avx2"))) inline __m256 LoadHalf256(const float* p, __m256i m, int) {
  return _mm256_maskload_ps(p, m);
}
__attribute__((target("avx2"))) inline __m256 LoadHalf256(const uint16_t* p, __m256i, int hi) {
  const __m256i pairs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm256_castsi256_ps(hi ? _mm256_and_si256(pairs, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)))
                                : _mm256_slli_epi32(pairs, 16));
}

__attribute__((target("avx2"))) inline __m256i HalfMask(int cols) {  // lanes j < cols set
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(cols), lane);
}

template <int R, typename WT>
__attribute__((target("avx2"))) void TileAvx2(const float* x, int64_t K, const WT* w, int hi, int64_t stride,
                                              const float* bias, float* out, int64_t ldo, int cols) {
  const __m256i m0 = HalfMask(cols), m1 = HalfMask(cols - 8);
  __m256 acc[R][2];
  _Pragma("GCC unroll 4") for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  const WT* wk = w;
  for (int64_t k = 0; k < K; ++k, wk += stride) {
    const __m256 w0 = LoadHalf256(wk, m0, hi), w1 = LoadHalf256(wk + 8 * ElementStep(WT{}), m1, hi);
    _Pragma("GCC unroll 4") for (int i = 0; i < R; ++i) {
      const __m256 xb = _mm256_broadcast_ss(x + i * K + k);
      acc[i][0] = _mm256_add_ps(acc[i][0], _mm256_mul_ps(xb, w0));
      acc[i][1] = _mm256_add_ps(acc[i][1], _mm256_mul_ps(xb, w1));
    }
  }
  _Pragma("GCC unroll 4") for (int i = 0; i < R; ++i) {
    __m256 o0 = acc[i][0], o1 = acc[i][1];
    if (bias) {
      o0 = _mm256_add_ps(o0, _mm256_maskload_ps(bias, m0));
      o1 = _mm256_add_ps(o1, _mm256_maskload_ps(bias + 8, m1));
    }
    _mm256_maskstore_ps(out + i * ldo, m0, o0);
    _mm256_maskstore_ps(out + i * ldo + 8, m1, o1);
  }
}

template <typename WT>
__attribute__((target("avx2"))) void BlockAvx2(const Block& b, const Slices<WT>& s) {
  for (int v = 0; v * kSlice < b.cols; ++v) {
    const int cols = static_cast<int>(b.cols - v * kSlice < kSlice ? b.cols - v * kSlice : kSlice);
    const float* bias = b.bias ? b.bias + v * kSlice : nullptr;
    int64_t r = 0;
    for (; r + kTileRows <= b.rows; r += kTileRows) {
      TileAvx2<kTileRows, WT>(b.x + r * b.K, b.K, s.base[v], s.hi[v], s.stride, bias,
                              b.out + r * b.ldo + v * kSlice, b.ldo, cols);
    }
    const float* x = b.x + r * b.K;
    float* out = b.out + r * b.ldo + v * kSlice;
    switch (b.rows - r) {
      case 1: TileAvx2<1, WT>(x, b.K, s.base[v], s.hi[v], s.stride, bias, out, b.ldo, cols); break;
      case 2: TileAvx2<2, WT>(x, b.K, s.base[v], s.hi[v], s.stride, bias, out, b.ldo, cols); break;
      case 3: TileAvx2<3, WT>(x, b.K, s.base[v], s.hi[v], s.stride, bias, out, b.ldo, cols); break;
      default: break;
    }
  }
}
#endif  // SPECWORKER_LINEAR_X86

// ---------------------------------------------------------------------------------------------
struct Isa {
  const char* name;
  void (*plain)(const Block&, const Slices<float>&);
  void (*panels_f32)(const Block&, const Slices<float>&);
  void (*panels_bf16)(const Block&, const Slices<uint16_t>&);
};

const Isa kGeneric = {"generic", BlockGeneric<float>, BlockGeneric<float>, BlockGeneric<uint16_t>};
#ifdef SPECWORKER_LINEAR_X86
const Isa kAvx512 = {"avx512", BlockAvx512<float, true>, BlockAvx512<float, false>, BlockAvx512<uint16_t, false>};
const Isa kAvx2 = {"avx2", BlockAvx2<float>, BlockAvx2<float>, BlockAvx2<uint16_t>};
#endif

struct IsaChoice {
  const Isa* isa = nullptr;
  std::string error;  // set when SPECWORKER_LINEAR_CPU_ISA asks for something unavailable
};

IsaChoice PickIsa() {
  const char* env = std::getenv("SPECWORKER_LINEAR_CPU_ISA");
  const std::string want = env && *env ? env : "auto";
  bool avx512 = false, avx2 = false;
#ifdef SPECWORKER_LINEAR_X86
  avx512 = __builtin_cpu_supports("avx512f");
  avx2 = __builtin_cpu_supports("avx2");
#endif
  IsaChoice c;
  if (want == "generic") {
    c.isa = &kGeneric;
  } else if (want == "avx2" || want == "avx512") {
    if (!(want == "avx2" ? avx2 : avx512)) {
      c.error = "SPECWORKER_LINEAR_CPU_ISA=" + want + " but this CPU does not support it";
      return c;
    }
#ifdef SPECWORKER_LINEAR_X86
    c.isa = want == "avx2" ? &kAvx2 : &kAvx512;
#endif
  } else if (want == "auto") {
#ifdef SPECWORKER_LINEAR_X86
    c.isa = avx512 ? &kAvx512 : (avx2 ? &kAvx2 : &kGeneric);
#else
    c.isa = &kGeneric;
#endif
  } else {
    c.error = "SPECWORKER_LINEAR_CPU_ISA=" + want + ", expected auto, avx512, avx2 or generic";
  }
  return c;
}

const IsaChoice& SelectedIsa() {
  static const IsaChoice choice = PickIsa();  // once per process
  return choice;
}

// ---------------------------------------------------------------------------------------------
struct Job {
  const Isa* isa;
  const float* x;
  const void* weight;
  int layout;
  const float* bias;
  float* out;
  int64_t M, K, N;
  int64_t block_cols, block_rows, num_row_blocks;
  int64_t wide_blocks;  // column blocks of block_cols before the narrow tail (blocks of kPanel columns)
};

template <typename WT>
Slices<WT> SlicesOf(const Job& j, int64_t n0) {
  Slices<WT> s;
  const WT* w = static_cast<const WT*>(j.weight);
  for (int v = 0; v < kMaxSlices; ++v) {
    s.hi[v] = 0;
    if (j.layout == SPECWORKER_LINEAR_PLAIN_F32) {
      s.base[v] = w + n0 + kSlice * v;  // only slices inside the block are read
    } else if (j.layout == SPECWORKER_LINEAR_PANELS_F32) {
      // n0 is a multiple of 32: slice v sits in panel n0 / 32 + v / 2 at column 16 (v % 2)
      s.base[v] = w + (n0 / kPanel + v / 2) * j.K * kPanel + kSlice * (v % 2);
    } else {  // bfloat16 panels: both slices of a panel start at the panel
      s.base[v] = w + (n0 / kPanel + v / 2) * j.K * kPanel;
      s.hi[v] = v % 2;
    }
  }
  s.stride = j.layout == SPECWORKER_LINEAR_PLAIN_F32 ? j.N : kPanel;
  return s;
}

void RunUnit(const void* ctx, int64_t unit) {
  const Job& j = *static_cast<const Job*>(ctx);
  const int64_t col = unit / j.num_row_blocks;
  const int64_t width = col < j.wide_blocks ? j.block_cols : kPanel;
  const int64_t n0 =
      col < j.wide_blocks ? col * j.block_cols : j.wide_blocks * j.block_cols + (col - j.wide_blocks) * kPanel;
  const int64_t r0 = unit % j.num_row_blocks * j.block_rows;
  Block b;
  b.x = j.x + r0 * j.K;
  b.out = j.out + r0 * j.N + n0;
  b.bias = j.bias ? j.bias + n0 : nullptr;
  b.rows = j.M - r0 < j.block_rows ? j.M - r0 : j.block_rows;
  b.K = j.K;
  b.ldo = j.N;
  b.cols = j.N - n0 < width ? j.N - n0 : width;
  switch (j.layout) {
    case SPECWORKER_LINEAR_PLAIN_F32: j.isa->plain(b, SlicesOf<float>(j, n0)); break;
    case SPECWORKER_LINEAR_PANELS_F32: j.isa->panels_f32(b, SlicesOf<float>(j, n0)); break;
    default: j.isa->panels_bf16(b, SlicesOf<uint16_t>(j, n0)); break;
  }
}

int Fail(std::string message) {
  g_error = std::move(message);
  return -1;
}

}  // namespace

extern "C" int specworker_batch_invariant_linear_cpu(const float* x, const void* weight, int layout,
                                                     const float* bias, float* out, int64_t M, int64_t K,
                                                     int64_t N, int max_threads) {
  const IsaChoice& choice = SelectedIsa();
  if (choice.isa == nullptr) return Fail(choice.error);
  std::string pool_error;
  if (specworker::PoolThreads(&pool_error) < 0) return Fail(pool_error);
  if (M < 0 || K < 0 || N < 0) return Fail("negative size");
  if (layout != SPECWORKER_LINEAR_PLAIN_F32 && layout != SPECWORKER_LINEAR_PANELS_F32 &&
      layout != SPECWORKER_LINEAR_PANELS_BF16) {
    return Fail("unknown weight layout " + std::to_string(layout));
  }
  if (layout != SPECWORKER_LINEAR_PLAIN_F32 && N % kPanel != 0) {
    return Fail("panel layouts need N % 32 == 0, got N = " + std::to_string(N));
  }
  if (M == 0 || N == 0) return 0;
  if (K == 0) {  // every output is +0 or its bias; x and weight may hold no memory
    for (int64_t r = 0; r < M; ++r) {
      for (int64_t n = 0; n < N; ++n) out[r * N + n] = bias ? 0.0f + bias[n] : 0.0f;
    }
    return 0;
  }
  if (x == nullptr || weight == nullptr || out == nullptr) return Fail("NULL x, weight or out");
  Job j;
  j.isa = choice.isa;
  j.x = x;
  j.weight = weight;
  j.layout = layout;
  j.bias = bias;
  j.out = out;
  j.M = M;
  j.K = K;
  j.N = N;
  // 64 columns at every M: two panel streams per tile keep more lines in flight than one. Blocks of 32 at M <= 4
  // (more units to balance the threads) were slower on every shape measured: 20.6 against 29.2 GB/s at M = 4 on
  // 576 x 1728, 26.3 against 31.6 at M = 1 (2 threads, weights from DRAM). The bits are the same either way.
  j.block_cols = 2 * kPanel;
  j.block_rows = kRowBlock;
  j.num_row_blocks = (M + kRowBlock - 1) / kRowBlock;
  const int64_t weight_bytes = K * N * (layout == SPECWORKER_LINEAR_PANELS_BF16 ? 2 : 4);
  const bool parallel = weight_bytes >= kParallelWeightBytes || M * K * N >= kParallelMacs;
  const int threads = parallel ? specworker::ParallelThreads(max_threads) : 1;
  // One row block (decode, verify): when the 64-column blocks do not split evenly over the threads, the last ones
  // are cut into 32-column blocks, so the threads' shares end together (576 x 576: 9 blocks over 2 threads ran 5
  // against 4; now 8 + 2 halves). Columns only: every output keeps its order, so its bits.
  const int64_t blocks = (N + j.block_cols - 1) / j.block_cols;
  const int64_t uneven = threads > 1 && j.num_row_blocks == 1 ? blocks % threads : 0;
  j.wide_blocks = blocks - uneven;
  // columns after the wide blocks (none when they reach N, the last one possibly partial)
  const int64_t tail = N > j.wide_blocks * j.block_cols ? N - j.wide_blocks * j.block_cols : 0;
  const int64_t units = (j.wide_blocks + (tail + kPanel - 1) / kPanel) * j.num_row_blocks;
  specworker::ParallelFor(units, RunUnit, &j, parallel ? max_threads : 1);
  return 0;
}

extern "C" const char* specworker_linear_cpu_error(void) { return g_error.c_str(); }

extern "C" const char* specworker_linear_cpu_isa(void) {
  const IsaChoice& choice = SelectedIsa();
  return choice.isa ? choice.isa->name : nullptr;
}

extern "C" int specworker_linear_cpu_threads(void) { return specworker::PoolThreads(nullptr); }
