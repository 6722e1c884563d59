// Does mma.sync m16n8k16 (bf16 -> f32) give element (i, j) of D = A B + C the same bits as element (j, i) of the
// transposed problem D^T = B^T A^T + C^T? The keys-as-M layout of paged_attention_bf16.cu relies on it. Each warp
// runs one trial: Q (16 x 16), K (16 x 16), C (16 x 16) of random bf16 / f32 with wide exponents; the row layout's
// S = Q K^T + C (two n8 tiles of keys) against the keys-as-M layout's S^T = K Q^T + C^T (Q rows 0..7 as N), a chain
// of `steps` MMAs each. Fragments are read straight from global memory (no ldmatrix). Prints the mismatch count.
// Build: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o mma_symmetry mma_symmetry.cu
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <vector>
#include <random>
#include <cuda_bf16.h>

__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ uint32_t Pair(const uint16_t* p) { return uint32_t(p[0]) | (uint32_t(p[1]) << 16); }

constexpr int kSteps = 4;
// q, k: [trial][step][16][16] bf16 bits (row = query / key, col = head_dim within the step); c: [trial][16][16] f32
// (row = query, col = key). out_row / out_t: [trial][8][16] (query 0..7, key).
__global__ void Trial(const uint16_t* q, const uint16_t* k, const float* c, float* out_row, float* out_t) {
  const int trial = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const uint16_t* Q = q + (size_t)trial * kSteps * 256;
  const uint16_t* K = k + (size_t)trial * kSteps * 256;
  const float* C = c + (size_t)trial * 256;
  // Row layout: rows = queries (16), n-tiles of 8 keys.
  float d[2][4];
  for (int nt = 0; nt < 2; ++nt) {
    d[nt][0] = C[g * 16 + 8 * nt + 2 * t], d[nt][1] = C[g * 16 + 8 * nt + 2 * t + 1];
    d[nt][2] = C[(g + 8) * 16 + 8 * nt + 2 * t], d[nt][3] = C[(g + 8) * 16 + 8 * nt + 2 * t + 1];
  }
  for (int s = 0; s < kSteps; ++s) {
    const uint16_t* Qs = Q + s * 256;
    const uint16_t* Ks = K + s * 256;
    const uint32_t a[4] = {Pair(Qs + g * 16 + 2 * t), Pair(Qs + (g + 8) * 16 + 2 * t), Pair(Qs + g * 16 + 2 * t + 8),
                           Pair(Qs + (g + 8) * 16 + 2 * t + 8)};
    for (int nt = 0; nt < 2; ++nt) {  // B[k = d][n = key] = K[key][d]
      const uint32_t b[2] = {Pair(Ks + (8 * nt + g) * 16 + 2 * t), Pair(Ks + (8 * nt + g) * 16 + 2 * t + 8)};
      Mma(d[nt], a, b);
    }
  }
  float* R = out_row + (size_t)trial * 128;
  for (int nt = 0; nt < 2; ++nt) {
    R[g * 16 + 8 * nt + 2 * t] = d[nt][0], R[g * 16 + 8 * nt + 2 * t + 1] = d[nt][1];  // rows 0..7 only
  }
  // Keys as M: A = K (16 keys x 16 d), B[k = d][n = query] = Q[query][d], queries 0..7; C^T.
  float e[4] = {C[(2 * t) * 16 + g], C[(2 * t + 1) * 16 + g], C[(2 * t) * 16 + g + 8], C[(2 * t + 1) * 16 + g + 8]};
  for (int s = 0; s < kSteps; ++s) {
    const uint16_t* Qs = Q + s * 256;
    const uint16_t* Ks = K + s * 256;
    const uint32_t a[4] = {Pair(Ks + g * 16 + 2 * t), Pair(Ks + (g + 8) * 16 + 2 * t), Pair(Ks + g * 16 + 2 * t + 8),
                           Pair(Ks + (g + 8) * 16 + 2 * t + 8)};
    const uint32_t b[2] = {Pair(Qs + g * 16 + 2 * t), Pair(Qs + g * 16 + 2 * t + 8)};
    Mma(e, a, b);
  }
  float* T = out_t + (size_t)trial * 128;  // T[query][key]
  T[(2 * t) * 16 + g] = e[0], T[(2 * t + 1) * 16 + g] = e[1], T[(2 * t) * 16 + g + 8] = e[2], T[(2 * t + 1) * 16 + g + 8] = e[3];
}

static uint16_t RandBf16(std::mt19937& r, int emin, int emax) {
  const uint32_t sign = r() & 1, exp = 127 + emin + r() % (emax - emin + 1), man = r() & 0x7f;
  if (r() % 16 == 0) return sign << 15;  // some zeros
  return uint16_t((sign << 15) | (exp << 7) | man);
}

int main() {
  const int trials = 1 << 16, per_block = 4;
  long bad_total = 0;
  for (int mode = 0; mode < 4; ++mode) {  // exponent ranges: narrow, medium, wide, tiny C
    const int emin[4] = {-2, -8, -40, -3}, emax[4] = {2, 8, 40, 3};
    const int cmin[4] = {-4, -12, -60, -100}, cmax[4] = {4, 12, 60, -90};
    std::mt19937 rng(1234 + mode);
    std::vector<uint16_t> q((size_t)trials * kSteps * 256), k(q.size());
    std::vector<float> c((size_t)trials * 256);
    for (auto& x : q) x = RandBf16(rng, emin[mode], emax[mode]);
    for (auto& x : k) x = RandBf16(rng, emin[mode], emax[mode]);
    for (auto& x : c) {
      const uint32_t sign = rng() & 1, exp = 127 + cmin[mode] + rng() % (cmax[mode] - cmin[mode] + 1), man = rng() & 0x7fffff;
      const uint32_t bits = rng() % 8 == 0 ? 0u : (sign << 31) | (exp << 23) | man;
      memcpy(&x, &bits, 4);
    }
    uint16_t *dq, *dk;
    float *dc, *dr, *dt;
    cudaMalloc(&dq, q.size() * 2), cudaMalloc(&dk, k.size() * 2), cudaMalloc(&dc, c.size() * 4);
    cudaMalloc(&dr, (size_t)trials * 128 * 4), cudaMalloc(&dt, (size_t)trials * 128 * 4);
    cudaMemcpy(dq, q.data(), q.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dk, k.data(), k.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dc, c.data(), c.size() * 4, cudaMemcpyHostToDevice);
    Trial<<<trials / per_block, 32 * per_block>>>(dq, dk, dc, dr, dt);
    std::vector<uint32_t> hr((size_t)trials * 128), ht(hr.size());
    cudaMemcpy(hr.data(), dr, hr.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(ht.data(), dt, ht.size() * 4, cudaMemcpyDeviceToHost);
    const cudaError_t err = cudaGetLastError();
    long bad = 0;
    for (size_t i = 0; i < hr.size(); ++i) bad += hr[i] != ht[i];
    printf("mode %d (bf16 exponents %d..%d, C exponents %d..%d): %ld of %zu elements differ (%s)\n", mode, emin[mode],
           emax[mode], cmin[mode], cmax[mode], bad, hr.size(), cudaGetErrorString(err));
    bad_total += bad + (err != cudaSuccess);
    cudaFree(dq), cudaFree(dk), cudaFree(dc), cudaFree(dr), cudaFree(dt);
  }
  printf("mma_symmetry: %s\n", bad_total == 0 ? "SAME BITS" : "DIFFERENT");
  return bad_total != 0;
}
