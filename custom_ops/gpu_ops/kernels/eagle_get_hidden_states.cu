// eagle_get_hidden_states CUDA kernels (docs/spec.md §5; docs/spec.md §8.13): the target hidden
// rows each draft slot consumes, packed in slot order, with the count kept on the device.
//   in:  input [token_num, H] (any dtype of elem_size bytes), per slot [bsz] int32: draft L and E
//        (after draft_model_preprocess), accept_num, target L of the step just finished
//   out: out [capacity, H], output_token_num [1] int32; scratch [2 * bsz + 1] int32 (caller's)
// Slot b keeps k_b = (L_b <= 0 ? 0 : E_b > 0 ? E_b : accept_num_b), clamped to [0, L_t,b]: the
// first k_b of its target rows [cu_t[b], cu_t[b] + L_t,b), which go to output rows
// [cu_out[b], cu_out[b] + k_b).
// Parallelization, two launches on the stream, no host sync, no cooperative launch:
//  1. offsets: one block of 1024 threads walks the slots in tiles of 1024; per tile one block
//     scan (warp shuffles, then the warp totals) of the pair (L_t,b, k_b) in 64 bits, carried
//     across tiles, so any bsz works. It stores cu_t[b] and cu_out[b + 1] in scratch, saturated
//     at token_num and capacity (an offset past the end only ever means "no row"), and
//     output_token_num = cu_out[bsz]. O(bsz / 1024) steps.
//  2. copy: a warp per output row, 8 rows per 256-thread block, grid-stride over the capacity
//     rows. The warp finds its slot by a binary search of cu_out (O(log bsz) broadcast loads that
//     L1 keeps), then copies the row with the widest vector (16, 8, 4, 2 or 1 bytes) that
//     divides the row size and both base addresses, or writes zeros (rows past the count, and a
//     source row >= token_num). Every output row is written exactly once, so the output needs no
//     memset. FastDeploy [C] instead builds a position map in block 0 and needs a cooperative
//     grid sync, whose grid is capped by occupancy.
#include "eagle_get_hidden_states.h"

#include <stdint.h>

#include "block_scan.cuh"

namespace {

constexpr int kScanThreads = 1024;
constexpr int kCopyThreads = 256;
constexpr int kRowsPerBlock = kCopyThreads / 32;
constexpr int kMaxCopyBlocks = 8192;

__global__ void __launch_bounds__(kScanThreads)
    EagleOffsetsKernel(const int32_t* __restrict__ draft_len, const int32_t* __restrict__ draft_enc,
                       const int32_t* __restrict__ accept_num,
                       const int32_t* __restrict__ target_len, int bsz, int token_num,
                       int capacity, int32_t* __restrict__ cu_in, int32_t* __restrict__ cu_out,
                       int32_t* __restrict__ output_token_num) {
  __shared__ specworker::BlockScanStorage<long long, kScanThreads, 2> scan;
  long long carry_in = 0;
  long long carry_out = 0;
  if (threadIdx.x == 0) cu_out[0] = 0;
  for (int base = 0; base < bsz; base += kScanThreads) {
    const int b = base + threadIdx.x;
    long long rows = 0;
    long long kept = 0;
    if (b < bsz) {
      rows = max(target_len[b], 0);
      const int32_t want = draft_len[b] <= 0 ? 0 : draft_enc[b] > 0 ? draft_enc[b] : accept_num[b];
      kept = min(static_cast<long long>(max(want, 0)), rows);
    }
    long long incl[2] = {rows, kept};  // inclusive sums of (L_t,b, k_b) within the tile
    long long total[2];
    specworker::BlockInclusiveScan<kScanThreads>(incl, total, scan, specworker::SumOp(), 0LL);
    if (b < bsz) {
      cu_in[b] = static_cast<int32_t>(min(carry_in + incl[0] - rows, static_cast<long long>(token_num)));
      cu_out[b + 1] = static_cast<int32_t>(min(carry_out + incl[1], static_cast<long long>(capacity)));
    }
    carry_in += total[0];
    carry_out += total[1];
  }
  if (threadIdx.x == 0) {
    *output_token_num = static_cast<int32_t>(min(carry_out, static_cast<long long>(capacity)));
  }
}

template <typename VecT>
__device__ __forceinline__ VecT Zero() {
  VecT z;
  memset(&z, 0, sizeof(VecT));
  return z;
}

template <typename VecT>
__global__ void __launch_bounds__(kCopyThreads)
    EagleCopyRowsKernel(const VecT* __restrict__ input, VecT* __restrict__ out,
                        long long vecs_per_row, int token_num, int capacity,
                        const int32_t* __restrict__ cu_in, const int32_t* __restrict__ cu_out,
                        int bsz) {
  const int lane = threadIdx.x & 31;
  const int total = __ldg(cu_out + bsz);
  const VecT zero = Zero<VecT>();
  for (long long r = static_cast<long long>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
       r < capacity; r += static_cast<long long>(gridDim.x) * kRowsPerBlock) {
    long long src = -1;
    if (r < total) {
      int lo = 0;  // smallest slot b with cu_out[b + 1] > r; then cu_out[b] <= r
      int hi = bsz - 1;
      while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (__ldg(cu_out + mid + 1) > r) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      src = __ldg(cu_in + lo) + (r - __ldg(cu_out + lo));
      if (src >= token_num) src = -1;
    }
    VecT* dst = out + r * vecs_per_row;
    if (src >= 0) {
      const VecT* from = input + src * vecs_per_row;
#pragma unroll 4
      for (long long k = lane; k < vecs_per_row; k += 32) dst[k] = from[k];
    } else {
#pragma unroll 4
      for (long long k = lane; k < vecs_per_row; k += 32) dst[k] = zero;
    }
  }
}

template <typename VecT>
cudaError_t LaunchCopy(const void* input, void* out, long long row_bytes, int token_num,
                       int capacity, const int32_t* cu_in, const int32_t* cu_out, int bsz,
                       cudaStream_t stream) {
  const long long blocks = min((static_cast<long long>(capacity) + kRowsPerBlock - 1) / kRowsPerBlock,
                               static_cast<long long>(kMaxCopyBlocks));
  EagleCopyRowsKernel<VecT><<<static_cast<int>(blocks), kCopyThreads, 0, stream>>>(
      static_cast<const VecT*>(input), static_cast<VecT*>(out),
      row_bytes / static_cast<long long>(sizeof(VecT)), token_num, capacity, cu_in, cu_out, bsz);
  return cudaGetLastError();
}

}  // namespace

extern "C" int specworker_eagle_get_hidden_states_launch(
    const void* input, int token_num, int hidden_size, int elem_size,
    const int32_t* seq_lens_this_time, const int32_t* seq_lens_encoder,
    const int32_t* accept_num, const int32_t* target_model_seq_lens_this_time, int bsz,
    int32_t* scratch, void* out, int capacity, int32_t* output_token_num, cudaStream_t stream) {
  const bool bad_sizes = bsz < 0 || token_num < 0 || hidden_size < 0 || capacity < 0 ||
                         !(elem_size == 1 || elem_size == 2 || elem_size == 4 || elem_size == 8);
  const bool bad_ptrs =
      scratch == nullptr || output_token_num == nullptr ||
      (bsz > 0 && (seq_lens_this_time == nullptr || seq_lens_encoder == nullptr ||
                   accept_num == nullptr || target_model_seq_lens_this_time == nullptr)) ||
      (hidden_size > 0 && capacity > 0 && out == nullptr) ||
      (hidden_size > 0 && token_num > 0 && input == nullptr);
  if (bad_sizes || bad_ptrs) return static_cast<int>(cudaErrorInvalidValue);
  int32_t* cu_in = scratch;         // [bsz]
  int32_t* cu_out = scratch + bsz;  // [bsz + 1]
  EagleOffsetsKernel<<<1, kScanThreads, 0, stream>>>(
      seq_lens_this_time, seq_lens_encoder, accept_num, target_model_seq_lens_this_time, bsz,
      token_num, capacity, cu_in, cu_out, output_token_num);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || capacity == 0 || hidden_size == 0) return static_cast<int>(err);

  const long long row_bytes = static_cast<long long>(hidden_size) * elem_size;
  // Row r starts at r * row_bytes, so a vector width that divides the row size and both base
  // addresses aligns every row.
  const unsigned long long bits = reinterpret_cast<uintptr_t>(input) |
                                  reinterpret_cast<uintptr_t>(out) |
                                  static_cast<unsigned long long>(row_bytes);
  if (bits % 16 == 0) {
    err = LaunchCopy<uint4>(input, out, row_bytes, token_num, capacity, cu_in, cu_out, bsz, stream);
  } else if (bits % 8 == 0) {
    err = LaunchCopy<uint2>(input, out, row_bytes, token_num, capacity, cu_in, cu_out, bsz, stream);
  } else if (bits % 4 == 0) {
    err = LaunchCopy<unsigned int>(input, out, row_bytes, token_num, capacity, cu_in, cu_out, bsz,
                                   stream);
  } else if (bits % 2 == 0) {
    err = LaunchCopy<unsigned short>(input, out, row_bytes, token_num, capacity, cu_in, cu_out,
                                     bsz, stream);
  } else {
    err = LaunchCopy<unsigned char>(input, out, row_bytes, token_num, capacity, cu_in, cu_out, bsz,
                                    stream);
  }
  return static_cast<int>(err);
}
