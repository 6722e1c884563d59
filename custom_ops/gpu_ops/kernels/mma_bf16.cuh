// The bf16 tensor-core building blocks of the CUDA kernels (batch_invariant_linear_bf16, paged_attention's
// bf16 path): cp.async 16-byte copies with zero fill, ldmatrix, and mma.sync m16n8k16 bf16 -> f32. Header-only,
// no framework include.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

// cp.async, ldmatrix and the bf16 MMA exist from sm_80. A build for an older target (an extension
// build that passes no -arch gets nvcc's default) still compiles: the device code traps, and the
// launcher refuses such a GPU before launching (cudaErrorNotSupported).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define SPECWORKER_BF16_MMA 1
#else
#define SPECWORKER_BF16_MMA 0
#endif

namespace specworker {

#if SPECWORKER_BF16_MMA
__device__ __forceinline__ uint32_t SharedAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
#endif

// 16 bytes global -> shared; valid == false writes 16 zero bytes and reads nothing. kL1: cached in L1 on the way
// (cp.async.ca, for data that several blocks of an SM read), else L2 only (cp.async.cg).
template <bool kL1 = false>
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid) {
#if SPECWORKER_BF16_MMA
  if constexpr (kL1) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(SharedAddr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
  } else {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SharedAddr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
  }
#else
  __trap();
#endif
}
__device__ __forceinline__ void CpAsyncCommit() {
#if SPECWORKER_BF16_MMA
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
#if SPECWORKER_BF16_MMA
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* p) {
#if SPECWORKER_BF16_MMA
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(SharedAddr(p)));
#else
  __trap();
#endif
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* p) {
#if SPECWORKER_BF16_MMA
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(SharedAddr(p)));
#else
  __trap();
#endif
}
__device__ __forceinline__ void LdMatrixX2Trans(uint32_t (&r)[2], const void* p) {
#if SPECWORKER_BF16_MMA
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(SharedAddr(p)));
#else
  __trap();
#endif
}

// c += a (16 x 16, row-major) * b (16 x 8, column-major), bf16 in, f32 accumulate.
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if SPECWORKER_BF16_MMA
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();
#endif
}

// 8 consecutive bf16 of a row of length len starting at column c (zeros past len), element-wise.
__device__ __forceinline__ uint4 Load8(const __nv_bfloat16* row, int c, int len, bool row_ok) {
  union {
    uint4 v;
    unsigned short h[8];
  } u;
  const unsigned short* src = reinterpret_cast<const unsigned short*>(row);
#pragma unroll
  for (int i = 0; i < 8; ++i) u.h[i] = row_ok && c + i < len ? src[c + i] : 0;
  return u.v;
}

}  // namespace specworker
