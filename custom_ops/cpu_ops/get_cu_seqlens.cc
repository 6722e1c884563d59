// get_cu_seqlens: exclusive prefix sum of per-slot lengths.
//   seq_lens [bsz] (or [bsz, 1]) int32  ->  cu_seqlens [bsz + 1] int32, cu[0] = 0.
// The smallest op of the extension; it exercises the build, the loader and the
// CPU/CUDA dispatch end to end. Negative lengths are an error on CPU; the CUDA
// kernel counts them as 0 (it cannot raise without a host sync).
#include "op_checks.h"

#ifdef SPECWORKER_WITH_CUDA
std::vector<paddle::Tensor> GetCuSeqlensCUDA(const paddle::Tensor& seq_lens);
#endif

namespace {

constexpr const char* kOp = "get_cu_seqlens";

std::vector<paddle::Tensor> GetCuSeqlensCPU(const paddle::Tensor& seq_lens) {
  const int64_t bsz = seq_lens.shape()[0];
  auto cu = paddle::empty({bsz + 1}, paddle::DataType::INT32, seq_lens.place());
  const int32_t* lens = seq_lens.data<int32_t>();
  int32_t* out = cu.data<int32_t>();
  out[0] = 0;
  for (int64_t b = 0; b < bsz; ++b) {
    PD_CHECK(lens[b] >= 0, kOp, ": seq_lens[", b, "] = ", lens[b], ", expected >= 0");
    out[b + 1] = out[b] + lens[b];
  }
  return {cu};
}

}  // namespace

std::vector<paddle::Tensor> GetCuSeqlens(const paddle::Tensor& seq_lens) {
  specworker::CheckGiven(kOp, {{"seq_lens", &seq_lens}});
  specworker::CheckPerSlot(kOp, "seq_lens", seq_lens, paddle::DataType::INT32);
  if (seq_lens.is_gpu()) {
#ifdef SPECWORKER_WITH_CUDA
    return GetCuSeqlensCUDA(seq_lens);
#else
    PD_THROW(kOp, ": got a GPU tensor but the extension was built without CUDA");
#endif
  }
  return GetCuSeqlensCPU(seq_lens);
}

std::vector<std::vector<int64_t>> GetCuSeqlensInferShape(const std::vector<int64_t>& seq_lens) {
  return {{seq_lens[0] < 0 ? -1 : seq_lens[0] + 1}};
}

std::vector<paddle::DataType> GetCuSeqlensInferDtype(const paddle::DataType&) {
  return {paddle::DataType::INT32};
}

PD_BUILD_OP(get_cu_seqlens)
    .Inputs({"seq_lens"})
    .Outputs({"cu_seqlens"})
    .SetKernelFn(PD_KERNEL(GetCuSeqlens))
    .SetInferShapeFn(PD_INFER_SHAPE(GetCuSeqlensInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(GetCuSeqlensInferDtype));
