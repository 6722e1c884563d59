// Tuning experiment for rebuild_padding's CUDA kernel (benchmarks/tuning/rebuild_padding_variants.py):
// the same gather (index-tensor form, 16-byte packs, no logprob) in several shapes, so one GPU run
// can compare them against a device copy. Not part of the op build.
//   variant 0: the kernel before tuning: per-slot loads behind early returns (a chain of five
//              dependent load rounds before the row's data), 128 threads, 8 packs in flight
//   variant 1: every per-slot value loaded before any test (two load rounds), 128 x 8
//   variant 2: as 1, 256 threads x 4 packs
//   variant 3: as 1, 64 threads x 16 packs
//   variant 4: as 1 with streaming stores (st.global.cs) and L2-only loads (ld.global.cg)
//   variant 5: as 1, 2 rows per 256-thread block (128 threads per row)
//   variant 6: as 1, 4 rows per 512-thread block (128 threads per row)
//   variant 7: as 2 with .cg loads + .cs stores
//   variant 8: no plan at all (row r copies row r): the copy structure's own ceiling
//   variant 9: as 8 with .cg loads + .cs stores
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

struct Args {
  const int32_t* cu_q;
  const int32_t* lens;
  const int32_t* dec;
  const int32_t* enc;
  const int32_t* bid;
  const int32_t* cu_out;
  int token_num, bsz;
};

__device__ __forceinline__ int64_t PlanChained(int r, const Args& a) {
  const int b = a.bid[r];
  if (b < 0 || b >= a.bsz) return -1;
  const int len = a.lens[b];
  const int enc = a.enc[b];
  if (len < 0 || enc < 0) return -1;
  if (len == 0 || (enc == 0 && a.dec[b] == 0)) return -1;
  if (enc > len) return -1;
  const int64_t start = a.cu_q[b];
  if (start < 0 || start + len > a.token_num) return -1;
  const int row_begin = a.cu_out[b];
  const int row_end = a.cu_out[b + 1];
  if (r < row_begin || r >= row_end) return -1;
  if (enc > 0) return start + enc - 1;
  const int local = r - row_begin;
  return local < len ? start + local : -1;
}

__device__ __forceinline__ int64_t PlanFlat(int r, const Args& a) {
  const int b = a.bid[r];
  if (b < 0 || b >= a.bsz) return -1;
  const int len = a.lens[b];
  const int enc = a.enc[b];
  const int dec = a.dec[b];
  const int64_t start = a.cu_q[b];
  const int row_begin = a.cu_out[b];
  const int row_end = a.cu_out[b + 1];
  if (len <= 0 || enc < 0 || (enc == 0 && dec == 0) || enc > len) return -1;
  if (start < 0 || start + len > a.token_num || r < row_begin || r >= row_end) return -1;
  if (enc > 0) return start + enc - 1;
  const int local = r - row_begin;
  return local < len ? start + local : -1;
}

template <int kThreads, int kUnroll, bool kStreaming>
__device__ __forceinline__ void CopyRow(const uint4* __restrict__ src, uint4* __restrict__ dst, int n,
                                        int tid) {
  if (src == nullptr) {
    for (int k = tid; k < n; k += kThreads) dst[k] = uint4{};
    return;
  }
  for (int base = tid; base < n; base += kThreads * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = base + u * kThreads;
      if (k < n) v[u] = kStreaming ? __ldcg(src + k) : src[k];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = base + u * kThreads;
      if (k < n) {
        if (kStreaming) {
          __stcs(dst + k, v[u]);
        } else {
          dst[k] = v[u];
        }
      }
    }
  }
}

template <int kThreads, int kUnroll, bool kFlat, bool kStreaming>
__global__ void __launch_bounds__(kThreads) OneRow(const uint4* __restrict__ tmp, uint4* __restrict__ out,
                                                   Args a, int n) {
  const int r = blockIdx.x;
  const int64_t src = kFlat ? PlanFlat(r, a) : PlanChained(r, a);
  CopyRow<kThreads, kUnroll, kStreaming>(src >= 0 ? tmp + src * n : nullptr, out + static_cast<int64_t>(r) * n, n,
                                         threadIdx.x);
}

// kRowsPerBlock rows per block: each 128-thread group plans and copies one row.
template <int kRowsPerBlock>
__global__ void __launch_bounds__(128 * kRowsPerBlock) MultiRow(const uint4* __restrict__ tmp,
                                                                uint4* __restrict__ out, Args a, int n, int rows) {
  const int r = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 7);
  if (r >= rows) return;
  const int64_t src = PlanFlat(r, a);
  CopyRow<128, 8, false>(src >= 0 ? tmp + src * n : nullptr, out + static_cast<int64_t>(r) * n, n,
                         threadIdx.x & 127);
}

template <bool kStreaming>
__global__ void __launch_bounds__(128) NoPlan(const uint4* __restrict__ tmp, uint4* __restrict__ out, int n) {
  const int64_t r = blockIdx.x;
  CopyRow<128, 8, kStreaming>(tmp + r * n, out + r * n, n, threadIdx.x);
}

}  // namespace

extern "C" int rp_variant_launch(int variant, const void* tmp, const int32_t* cu_q, const int32_t* lens,
                                 const int32_t* dec, const int32_t* enc, const int32_t* bid,
                                 const int32_t* cu_out, void* out, int token_num, int bsz, int rows,
                                 int row_bytes, cudaStream_t stream) {
  const Args a{cu_q, lens, dec, enc, bid, cu_out, token_num, bsz};
  const int n = row_bytes / 16;
  const auto* t = static_cast<const uint4*>(tmp);
  auto* o = static_cast<uint4*>(out);
  switch (variant) {
    case 0: OneRow<128, 8, false, false><<<rows, 128, 0, stream>>>(t, o, a, n); break;
    case 1: OneRow<128, 8, true, false><<<rows, 128, 0, stream>>>(t, o, a, n); break;
    case 2: OneRow<256, 4, true, false><<<rows, 256, 0, stream>>>(t, o, a, n); break;
    case 3: OneRow<64, 16, true, false><<<rows, 64, 0, stream>>>(t, o, a, n); break;
    case 4: OneRow<128, 8, true, true><<<rows, 128, 0, stream>>>(t, o, a, n); break;
    case 5: MultiRow<2><<<(rows + 1) / 2, 256, 0, stream>>>(t, o, a, n, rows); break;
    case 6: MultiRow<4><<<(rows + 3) / 4, 512, 0, stream>>>(t, o, a, n, rows); break;
    case 7: OneRow<256, 4, true, true><<<rows, 256, 0, stream>>>(t, o, a, n); break;
    case 8: NoPlan<false><<<rows, 128, 0, stream>>>(t, o, n); break;
    case 9: NoPlan<true><<<rows, 128, 0, stream>>>(t, o, n); break;
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}
