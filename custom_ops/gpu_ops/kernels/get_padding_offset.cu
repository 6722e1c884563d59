// get_padding_offset CUDA kernel (docs/spec.md §4.1): packs this step's query tokens and builds the
// varlen index in one launch.
//   in:  input_ids [N, S] i64 (optional), seq_lens_this_time [bsz] i32,
//        draft_tokens [N, D] i64 with seq_lens_encoder [bsz] i32 (optional pair)
//   out: ids_remove_padding [cap] i64 (optional), batch_id_per_token [cap] i32,
//        cu_seqlens_q = cu_seqlens_k [bsz + 1] i32, cap = token_num_cpu
// Parallelization: one block of 256 threads per slot and no communication between blocks.
// Block b reads all bsz lengths (each thread a strided subset; one block reduction of two
// sums, block_scan.cuh): those before b give its row start cu_q[b], all of them give T.
// Thread 0 writes cu_q[b + 1] and cu_k[b + 1]; the threads then copy the slot's L_b tokens, one row each
// (coalesced reads of the source row and coalesced writes). Rows [T, cap) get -1 through a
// grid-stride loop over every block; when cap is large next to bsz, fill-only blocks are
// added. Per-thread work is O(bsz / 256 + L_b / 256); the repeated length reads (bsz per
// block) hit L1/L2 and cost about one coalesced load per thread at bsz = 256. FastDeploy's
// version has each warp lane scan the whole prefix (O(bsz / 32) per thread).
// Out-of-range values never leave the buffers: negative lengths count as 0, rows past cap
// are not written, a token index past the source row's width (D or S) yields -1.
#include "get_padding_offset.h"

#include "block_scan.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kFillRowsPerBlock = 4 * kThreads;

// Sums of max(lens[j], 0) over j < slot (*before) and over every j (*total), returned to
// every thread of the block. All threads must call it. 64-bit, so corrupt lengths cannot
// wrap a row index negative.
__device__ __forceinline__ void SumLengths(const int32_t* __restrict__ lens, int bsz, int slot,
                                           long long* before, long long* total) {
  __shared__ specworker::BlockScanStorage<long long, kThreads, 2> storage;
  long long sums[2] = {0, 0};  // (before, total)
  for (int j = threadIdx.x; j < bsz; j += kThreads) {
    const long long n = max(lens[j], 0);
    sums[1] += n;
    if (j < slot) sums[0] += n;
  }
  specworker::BlockSum<kThreads>(sums, storage);
  *before = sums[0];
  *total = sums[1];
}

__global__ void __launch_bounds__(kThreads)
    GetPaddingOffsetKernel(const int64_t* __restrict__ input_ids, int S,
                           const int32_t* __restrict__ lens,
                           const int64_t* __restrict__ draft_tokens, int D,
                           const int32_t* __restrict__ enc, int bsz, int cap,
                           int64_t* __restrict__ ids_out, int32_t* __restrict__ batch_id,
                           int32_t* __restrict__ cu_q, int32_t* __restrict__ cu_k) {
  const int slot = blockIdx.x;
  long long start;
  long long total;
  SumLengths(lens, bsz, slot, &start, &total);
  if (slot == 0 && threadIdx.x == 0) {
    cu_q[0] = 0;
    cu_k[0] = 0;
  }
  if (slot < bsz) {
    const long long n = max(lens[slot], 0);
    if (threadIdx.x == 0) {
      cu_q[slot + 1] = static_cast<int32_t>(start + n);
      cu_k[slot + 1] = static_cast<int32_t>(start + n);
    }
    const bool decode = enc != nullptr && enc[slot] <= 0;
    const int width = decode ? D : S;
    const int64_t* src = decode ? draft_tokens : input_ids;
    const long long end = min(start + n, static_cast<long long>(cap));
    for (long long t = start + threadIdx.x; t < end; t += kThreads) {
      const long long i = t - start;
      batch_id[t] = slot;
      if (ids_out != nullptr) {
        ids_out[t] = i < width ? src[slot * static_cast<long long>(width) + i] : -1;
      }
    }
  }
  for (long long t = total + static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x; t < cap;
       t += static_cast<long long>(gridDim.x) * kThreads) {
    batch_id[t] = -1;
    if (ids_out != nullptr) ids_out[t] = -1;
  }
}

}  // namespace

extern "C" int specworker_get_padding_offset_launch(
    const int64_t* input_ids, int max_seq_len, const int32_t* seq_lens_this_time,
    const int64_t* draft_tokens, int max_draft_tokens, const int32_t* seq_lens_encoder, int bsz,
    int token_num_cpu, int64_t* ids_remove_padding, int32_t* batch_id_per_token,
    int32_t* cu_seqlens_q, int32_t* cu_seqlens_k, cudaStream_t stream) {
  const bool bad_sizes = bsz < 0 || token_num_cpu < 0 || max_seq_len < 0 || max_draft_tokens < 0;
  // A NULL is only allowed where nothing would be read through it (zero-size buffers).
  const bool bad_ptrs =
      cu_seqlens_q == nullptr || cu_seqlens_k == nullptr ||
      (token_num_cpu > 0 && batch_id_per_token == nullptr) ||
      (bsz > 0 && seq_lens_this_time == nullptr) ||
      (bsz > 0 && (draft_tokens != nullptr) != (seq_lens_encoder != nullptr)) ||
      (ids_remove_padding != nullptr && input_ids == nullptr && bsz > 0 && max_seq_len > 0);
  if (bad_sizes || bad_ptrs) return static_cast<int>(cudaErrorInvalidValue);
  const int fill_blocks = static_cast<int>(
      (static_cast<long long>(token_num_cpu) + kFillRowsPerBlock - 1) / kFillRowsPerBlock);
  const int blocks = max(max(bsz, 1), fill_blocks);
  // Index-only calls (no ids_remove_padding) never look at the token sources.
  const int32_t* enc = ids_remove_padding != nullptr ? seq_lens_encoder : nullptr;
  GetPaddingOffsetKernel<<<blocks, kThreads, 0, stream>>>(
      input_ids, max_seq_len, seq_lens_this_time, draft_tokens, max_draft_tokens, enc, bsz,
      token_num_cpu, ids_remove_padding, batch_id_per_token, cu_seqlens_q, cu_seqlens_k);
  return static_cast<int>(cudaGetLastError());
}
