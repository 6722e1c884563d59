// sm_90 building blocks of batch_invariant_linear_bf16's warp-specialised tiles: mbarriers (init, expect-tx,
// parity wait, arrive on a cluster peer's barrier), bulk tensor copies (TMA) global -> shared that complete on an
// mbarrier, alone or multicast to the blocks of a cluster, the cluster rank, and setmaxnreg. Header-only, no
// framework include; CUtensorMap is only a type here (the host encodes it through the driver entry point).
// Like wgmma, setmaxnreg exists only in sm_90a code; everything here compiles to traps elsewhere.
#pragma once
#include <cuda.h>
#include <stdint.h>

#include "wgmma_bf16.cuh"

namespace specworker {

__device__ __forceinline__ void MbarInit(uint32_t bar, uint32_t count) {
#if SPECWORKER_WGMMA
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}
// Barrier inits of this thread become visible to the cluster (its peers arrive on them and copy into them).
__device__ __forceinline__ void FenceMbarInit() {
#if SPECWORKER_WGMMA
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// One arrival that also expects `bytes` more bytes of bulk copies in the current phase.
__device__ __forceinline__ void MbarArriveExpectTx(uint32_t bar, uint32_t bytes) {
#if SPECWORKER_WGMMA
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
// Waits until the phase of parity `parity` has completed (a fresh barrier counts parity 1 as completed).
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
#if SPECWORKER_WGMMA
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
#endif
}
// One arrival on the barrier at this shared offset in the cluster's block `rank`. The default (CTA-scope) release
// semantics: what it publishes is that this warpgroup's wgmma reads of a stage have completed (wgmma.wait_group),
// and the cluster-scope form costs a GPU-wide memory fence per arrival (MEMBAR.ALL.GPU in SASS), which also waits
// for the last tile's output stores.
__device__ __forceinline__ void MbarArriveCluster(uint32_t bar, uint32_t rank) {
#if SPECWORKER_WGMMA
  asm volatile(
      "{\n.reg .b32 r;\nmapa.shared::cluster.u32 r, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [r];\n}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
#endif
}

// The box of `map` at (c0 innermost, c1) into this block's shared dst; its bytes complete on bar.
__device__ __forceinline__ void TmaLoad2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1) {
#if SPECWORKER_WGMMA
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
#endif
}
// The same box into shared dst of every cluster block in `mask`, completing on the barrier at bar in each.
__device__ __forceinline__ void TmaLoad2dMulticast(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0,
                                                   int c1, uint16_t mask) {
#if SPECWORKER_WGMMA
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
#endif
}

__device__ __forceinline__ uint32_t ClusterRank() {
  uint32_t r = 0;
#if SPECWORKER_WGMMA
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
#endif
  return r;
}

// The warpgroup's registers per thread, lowered (producer) or raised (consumers); needs a register cap at entry.
template <int N>
__device__ __forceinline__ void SetMaxNRegDec() {
#if SPECWORKER_WGMMA
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N>
__device__ __forceinline__ void SetMaxNRegInc() {
#if SPECWORKER_WGMMA
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

}  // namespace specworker
