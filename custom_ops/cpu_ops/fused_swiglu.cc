// fused_swiglu: silu(gate) * up of the packed MLP projection in one call (docs/spec.md §4.12).
//   gate_up [R, 2I] float32 (gate columns, then up, as SwiGLU's gate_up_proj lays them out) -> out [R, I] float32.
// out[r, i] = fl(silu(gate_up[r, i]) * gate_up[r, I + i]), silu the float32 sequence of gpu_ops/kernels/silu_f32.h,
// which the CUDA kernel (gpu_ops/kernels/fused_swiglu.cu) runs too: IEEE adds, multiplies and one divide, each
// rounded once, no FMA, no libm, so the devices agree bit for bit and an output depends on its two inputs alone
// (batch invariant). A plain loop on the caller's thread; branch-free, so the compiler vectorises it.
// Not named swiglu: that is a built-in Paddle op, which a custom op of the same name would override.
#include "op_checks.h"

#ifdef SPECWORKER_WITH_CUDA
#include "fused_swiglu_cuda.h"
#endif

#if defined(__FAST_MATH__)
#error "fused_swiglu.cc must not be compiled with -ffast-math: it would contract and reorder silu's rounded steps"
#endif
// After every other include, so only silu and the kernel below are affected (and silu inlines into the loop).
// no-tree-pre: partial redundancy elimination would copy silu's clamped (constant) cases into branches, and a loop
// with branches does not vectorise (the same IEEE operations either way, so the same bits).
#pragma GCC optimize("fp-contract=off", "no-tree-pre")
#pragma STDC FP_CONTRACT OFF

#include "kernels/silu_f32.h"

namespace {

constexpr const char* kOp = "fused_swiglu";

// gu [rows, 2 * inter] -> out [rows, inter]. One copy per instruction set, picked at load: only IEEE operations, so
// every copy gives the same bits (AVX-512 runs ~3x faster than the baseline SSE2 copy).
__attribute__((target_clones("avx512f", "avx2", "default")))
void FusedSwigluRows(const float* gu, float* out, int64_t rows, int64_t inter) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gu + r * 2 * inter;
    const float* up = gate + inter;
    float* o = out + r * inter;
    for (int64_t i = 0; i < inter; ++i) o[i] = specworker::silu::SiluF32(gate[i]) * up[i];
  }
}

// rows > 0; out allocated by FusedSwiglu.
void FusedSwigluCPU(const paddle::Tensor& gate_up, paddle::Tensor& out) {
  FusedSwigluRows(gate_up.data<float>(), out.data<float>(), gate_up.shape()[0], gate_up.shape()[1] / 2);
}

void CheckArgs(const paddle::Tensor& gate_up) {
  specworker::CheckDtype(kOp, "gate_up", gate_up, paddle::DataType::FLOAT32);
  specworker::CheckRank(kOp, "gate_up", gate_up, 2);  // [R, 2I]
  const int64_t width = gate_up.shape()[1];
  PD_CHECK(width >= 2 && width % 2 == 0, kOp, ": gate_up has shape ", specworker::ShapeStr(gate_up.shape()),
           ", expected [R, 2I] with an even last dimension 2I >= 2 (I gate columns, then I up columns)");
  specworker::CheckFitsInt32(kOp, "R (gate_up.shape[0])", gate_up.shape()[0]);
  specworker::CheckFitsInt32(kOp, "2I (gate_up.shape[1])", width);
}

}  // namespace

std::vector<paddle::Tensor> FusedSwiglu(const paddle::Tensor& gate_up) {
  specworker::CheckGiven(kOp, {{"gate_up", &gate_up}});
  CheckArgs(gate_up);
  const int64_t rows = gate_up.shape()[0];
  auto out = paddle::empty({rows, gate_up.shape()[1] / 2}, paddle::DataType::FLOAT32, gate_up.place());
  if (rows == 0) return {out};
  if (gate_up.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    FusedSwigluCUDA(gate_up, out);
#else
    PD_THROW(kOp, ": got a GPU tensor but the extension was built without CUDA");
#endif
  } else {
    FusedSwigluCPU(gate_up, out);
  }
  return {out};
}

// The kernel without Paddle's custom-op dispatch (~15 us a call, a 1-row decode's whole kernel is ~5 us): called
// through ctypes by ops/_cpu_linear.py's swiglu_cpu on the calls it has checked (a float32 [rows, 2 inter] CPU
// tensor, contiguous, rows and 2 inter in 1 .. 2^31 - 1) into a fresh [rows, inter] output. The same loop as the op,
// so the same bits. Returns 0.
extern "C" int specworker_fused_swiglu_cpu(const float* gate_up, float* out, int64_t rows, int64_t inter) {
  FusedSwigluRows(gate_up, out, rows, inter);
  return 0;
}

std::vector<std::vector<int64_t>> FusedSwigluInferShape(const std::vector<int64_t>& gate_up) {
  if (gate_up.size() != 2) return {gate_up};  // FusedSwiglu's check rejects it
  return {{gate_up[0], gate_up[1] / 2}};
}

std::vector<paddle::DataType> FusedSwigluInferDtype(const paddle::DataType&) {
  return {paddle::DataType::FLOAT32};
}

PD_BUILD_OP(fused_swiglu)
    .Inputs({"gate_up"})
    .Outputs({"out"})
    .SetKernelFn(PD_KERNEL(FusedSwiglu))
    .SetInferShapeFn(PD_INFER_SHAPE(FusedSwigluInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(FusedSwigluInferDtype));
