"""Attribution builds for the A/B and the test's broken build (not for the kernel itself), from the working tree's
paged_attention_bf16.cu. Usage: python3 variants.py SRC.cu OUTDIR [call]
call 1 (the first version; each with one of its three changes undone):
  oldapp.cu:  the three-launch path's append is paged_kv.cuh's AppendKernel again (not AppendRowKernel);
  oldcomb.cu: CombineKernel always takes its barrier path (not the few-chunks shuffles);
  early.cu:   the fused / two-launch append of row t0 stores before the first tiles are issued (its k, v still read
              in the prologue).
call 2 (the second version):
  c128.cu:    CombineKernel blocks of 128 threads at every head_dim (as before);
  broken.cu:  the few-chunks combine leaves columns past 128 unwritten (for seeing the new test fail).
calls 3 and 4 (the third version: one warp per combine block; the fourth: CombineWarpKernel past one wave of
CombineKernel's blocks):
  broken.cu:  the warp combine's second pass over the columns (head_dim > 128) reuses the first pass's chunk states."""
import sys
from pathlib import Path

src, outdir = Path(sys.argv[1]).read_text(), Path(sys.argv[2])
call = sys.argv[3] if len(sys.argv) > 3 else "2"


def rep(s, old, new):
    assert s.count(old) == 1, old
    return s.replace(old, new)


if call in ("3", "4"):
    (outdir / "broken.cu").write_text(rep(src, "    if (base > 0) {", "    if (false) {"))
    sys.exit(0)
if call == "2":
    (outdir / "c128.cu").write_text(rep(src, "  const int combine_threads = head_dim < kThreads ? (head_dim + 31) / 32 * 32 : kThreads;",
                                        "  const int combine_threads = kThreads;"))
    (outdir / "broken.cu").write_text(rep(src, "    for (int d = threadIdx.x + blockDim.x; d < D; d += blockDim.x) {",
                                          "    for (int d = D; d < D; d += blockDim.x) {"))
    sys.exit(0)
s = rep(src, "    if (vec) {\n      AppendRowKernel<uint4><<<token_cap, kThreads, 0, stream>>>(a, k, v, key_cache, value_cache);\n"
        "    } else {\n      AppendRowKernel<bf16><<<token_cap, kThreads, 0, stream>>>(a, k, v, key_cache, value_cache);\n    }",
        "    if (vec) {\n      specworker::paged::AppendKernel<bf16, uint4, Hook><<<token_cap, kThreads, 0, stream>>>(a, k, v, key_cache, value_cache);\n"
        "    } else {\n      specworker::paged::AppendKernel<bf16, bf16, Hook><<<token_cap, kThreads, 0, stream>>>(a, k, v, key_cache, value_cache);\n    }")
s = rep(s, "bool Aligned16(const void* p)", "struct Hook {\n  __device__ void operator()() const { LaunchDependents(); }\n};\nbool Aligned16(const void* p)")
(outdir / "oldapp.cu").write_text(s)
(outdir / "oldcomb.cu").write_text(rep(src, "  if (n_chunks <= kCombinePre) {", "  if (false) {"))
s = rep(src, "    append_row0();  // split 0 computes chunk 0: it gets here\n", "")
s = rep(s, "  if (kFused && z == 0) {\n    if (cluster_merge && row0_zero) {", "  append_row0();\n  if (kFused && z == 0) {\n    if (cluster_merge && row0_zero) {")
s = rep(s, "  if (b < 0 || (merge_here ? n_chunks == 1 && z > 0 : z >= n_chunks)) {\n    append_row0();\n",
        "  if (b < 0 || (merge_here ? n_chunks == 1 && z > 0 : z >= n_chunks)) {\n")
(outdir / "early.cu").write_text(s)
