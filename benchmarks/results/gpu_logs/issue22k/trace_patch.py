"""Writes a timing-trace copy of paged_attention_bf16.cu (not for the kernel itself): thread 0 of every block of the
append (kernel 0), chunk (1) and combine (2) kernels records %globaltimer and clock64 at marks, into a __device__
array that specworker_pa_trace_read copies out. Usage: python3 trace_patch.py SRC.cu OUT.cu

Marks: append 0 entry, 1 end. Chunk 0 entry, 6 after the fused kernels' first wait, 1 after the setup barrier,
2 after the append wait, 3 first tile landed, 4 after the tile loop, 5 end. Combine 0 entry, 1 after the wait,
2 after its (first) column pass's stores."""
import sys
from pathlib import Path

src, dst = sys.argv[1], sys.argv[2]
s = Path(src).read_text()

HEAD = r'''
namespace {
constexpr size_t kTraceBlocks = 8192;
__device__ unsigned long long g_trace[3 * kTraceBlocks * 16];
__device__ __forceinline__ void TraceMark(int kern, int mark) {
  if (threadIdx.x != 0) return;
  unsigned long long gt;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(gt));
  const long long ck = clock64();
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  const size_t bid = blockIdx.x + static_cast<size_t>(gridDim.x) * (blockIdx.y + static_cast<size_t>(gridDim.y) * blockIdx.z);
  if (bid >= kTraceBlocks) return;
  const size_t base = (static_cast<size_t>(kern) * kTraceBlocks + bid) * 16;
  g_trace[base + 2 * mark] = gt;
  g_trace[base + 2 * mark + 1] = static_cast<unsigned long long>(ck);
  g_trace[base + 15] = sm + 1;
}
}  // namespace
extern "C" int specworker_pa_trace_read(void* host, size_t bytes) {
  return static_cast<int>(cudaMemcpyFromSymbol(host, g_trace, bytes));
}
extern "C" int specworker_pa_trace_clear() {
  static unsigned long long zeros[3 * kTraceBlocks * 16];
  return static_cast<int>(cudaMemcpyToSymbol(g_trace, zeros, sizeof(zeros)));
}
'''


def put(anchor, text, after=True, count=1):
    global s
    n = s.count(anchor)
    assert n == count, (anchor, n)
    s = s.replace(anchor, anchor + text if after else text + anchor)


put('#include "paged_kv.cuh"\n', HEAD)
# append
put("    AppendRowKernel(Params a, const bf16* __restrict__ k, const bf16* __restrict__ v, bf16* __restrict__ kc,\n"
    "                    bf16* __restrict__ vc) {\n", "  TraceMark(0, 0);\n")
put("    *reinterpret_cast<Vec*>(vc + dst) = early ? v0 : *reinterpret_cast<const Vec*>(v + src0 + e * per);\n  }\n",
    "  TraceMark(0, 1);\n")
# chunk
put("  if (kFused) WaitPrevious();  // the previous kernel of the stream may write any input\n",
    "  TraceMark(1, 0);\n", after=False)
put("  if (kFused) WaitPrevious();  // the previous kernel of the stream may write any input\n",
    "  if (kFused) TraceMark(1, 6);\n")
put("  if (!kFused) WaitPrevious();  // the append's cache writes are visible from here on\n",
    "  TraceMark(1, 1);\n", after=False)
put("  if (!kFused) WaitPrevious();  // the append's cache writes are visible from here on\n",
    "  TraceMark(1, 2);\n")
put("      if (i == 0) qf.Load(Qs, lane);\n", "      if (i == 0) TraceMark(1, 3);\n")
put("  }\n  CpAsyncWait<0>();\n  if (merge_here && n_chunks > 1) {", "  TraceMark(1, 4);\n", after=False)
put("    MergeTileRows(a, g, rows, bad_from, z, splits, ws_o, ws_ml, out);\n  }\n", "  TraceMark(1, 5);\n")
# combine: CombineKernel (a block per row and head) and / or CombineWarpKernel (a warp; call 3 on)
WAIT = "  WaitPrevious();  // the chunk kernel's states and rows are visible from here on (every block waits)\n"
put(WAIT, "  TraceMark(2, 1);\n", count=s.count(WAIT))
if "  extern __shared__ float s_f[];  // [nc]" in s:
    put("  extern __shared__ float s_f[];  // [nc]", "  TraceMark(2, 0);\n", after=False)
    put("    if (threadIdx.x < D) o_row[threadIdx.x] = __float2bfloat16_rn(__fdiv_rn(o, l));\n", "    TraceMark(2, 2);\n")
if "  const int t = blockIdx.x, h = blockIdx.y, lane = threadIdx.x;\n" in s:
    put("  const int t = blockIdx.x, h = blockIdx.y, lane = threadIdx.x;\n", "  TraceMark(2, 0);\n")
    put("      for (int j = 0; j < W; ++j) o_row[d0 + j] = __float2bfloat16_rn(__fdiv_rn(o[j], l));\n    }\n",
        "    TraceMark(2, 2);\n")
Path(dst).write_text(s)
