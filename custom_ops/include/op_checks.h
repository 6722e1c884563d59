// Argument checks shared by every specworker op binding (CPU and CUDA).
// Each check throws a Paddle error that starts with the op name and states the
// expected and the actual value, so a wrong call never reaches a kernel.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "paddle/extension.h"

namespace specworker {

// Every required input was given. Paddle hands a None for a required input to the kernel as an
// undefined tensor (no implementation), on which dtype() or shape() dereferences null; a tensor
// whose elements have no storage is just as unreadable. Each op runs this first, before any
// other check reads an input, so even a direct call of the registered op raises instead of
// crashing the process. (Zero-element tensors are legal inputs and carry no storage.)
inline void CheckGiven(const char* op,
                       std::initializer_list<std::pair<const char*, const paddle::Tensor*>> inputs) {
  for (const auto& [name, x] : inputs) {
    PD_CHECK(x->defined(), op, ": ", name, " is a required input, got None (an undefined tensor)");
    PD_CHECK(x->numel() == 0 || x->initialized(), op, ": ", name,
             " is an uninitialised tensor (", x->numel(), " elements without storage)");
  }
}

inline std::string ShapeStr(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

inline std::string DtypeStr(paddle::DataType t) {
  return phi::DataTypeToString(t);
}

inline void CheckDtype(const char* op, const char* name, const paddle::Tensor& x,
                       paddle::DataType want) {
  PD_CHECK(x.dtype() == want, op, ": ", name, " has dtype ", DtypeStr(x.dtype()),
           ", expected ", DtypeStr(want));
}

inline void CheckRank(const char* op, const char* name, const paddle::Tensor& x, int rank) {
  PD_CHECK(static_cast<int>(x.shape().size()) == rank, op, ": ", name, " has shape ",
           ShapeStr(x.shape()), ", expected a ", rank, "-D tensor");
}

// A per-slot scalar: [bsz] (ours) or FastDeploy's [bsz, 1]. Returns bsz.
inline int64_t CheckPerSlot(const char* op, const char* name, const paddle::Tensor& x,
                            paddle::DataType want, int64_t bsz = -1) {
  CheckDtype(op, name, x, want);
  const auto& s = x.shape();
  bool ok = s.size() == 1 || (s.size() == 2 && s[1] == 1);
  PD_CHECK(ok, op, ": ", name, " has shape ", ShapeStr(s),
           ", expected a per-slot tensor [bsz] or [bsz, 1]");
  if (bsz >= 0) {
    PD_CHECK(s[0] == bsz, op, ": ", name, " has ", s[0], " slots (shape ", ShapeStr(s),
             "), expected bsz = ", bsz);
  }
  return s[0];
}

// A per-slot row buffer [rows, width] with rows >= bsz (FastDeploy passes its whole
// [max_num_seqs, width] buffer; rows past bsz are not read). Returns width.
inline int64_t CheckSlotRows(const char* op, const char* name, const paddle::Tensor& x,
                             paddle::DataType want, int64_t bsz) {
  CheckDtype(op, name, x, want);
  CheckRank(op, name, x, 2);
  PD_CHECK(x.shape()[0] >= bsz, op, ": ", name, " has shape ", ShapeStr(x.shape()),
           ", expected at least bsz = ", bsz, " rows");
  return x.shape()[1];
}

// A cu_* prefix sum: 1-D int32 [bsz + 1] (docs/spec.md §1; never the seed's [N + 1, 1] buffer, §7 item 6).
inline void CheckCuSeqlens(const char* op, const char* name, const paddle::Tensor& x, int64_t bsz) {
  CheckDtype(op, name, x, paddle::DataType::INT32);
  const auto& s = x.shape();
  PD_CHECK(s.size() == 1 && s[0] == bsz + 1, op, ": ", name, " has shape ", ShapeStr(s),
           ", expected [bsz + 1] = [", bsz + 1, "]");
}

// A hidden-state tensor: float32, float16 or bfloat16. Returns the element size in bytes.
inline int CheckFloatDtype(const char* op, const char* name, const paddle::Tensor& x) {
  switch (x.dtype()) {
    case paddle::DataType::FLOAT32:
      return 4;
    case paddle::DataType::FLOAT16:
    case paddle::DataType::BFLOAT16:
      return 2;
    default:
      PD_THROW(op, ": ", name, " has dtype ", DtypeStr(x.dtype()),
               ", expected float32, float16 or bfloat16");
  }
}

// Sizes handed to a launcher as int.
inline void CheckFitsInt32(const char* op, const char* what, int64_t value) {
  PD_CHECK(value >= 0 && value <= INT32_MAX, op, ": ", what, " = ", value,
           " does not fit the kernel's int32 sizes");
}

// A per-slot scalar buffer ([rows] or [rows, 1]) with rows >= bsz: FastDeploy passes whole
// [max_num_seqs] buffers while seq_lens_this_time may cover only the live slots. Returns rows.
inline int64_t CheckPerSlotRows(const char* op, const char* name, const paddle::Tensor& x,
                                paddle::DataType want, int64_t bsz) {
  const int64_t rows = CheckPerSlot(op, name, x, want);
  PD_CHECK(rows >= bsz, op, ": ", name, " has ", rows, " slots (shape ", ShapeStr(x.shape()),
           "), expected at least bsz = ", bsz);
  return rows;
}

// A one-element tensor of shape [1] (a device flag or limit such as not_need_stop, stop_nums).
inline void CheckSingle(const char* op, const char* name, const paddle::Tensor& x,
                        paddle::DataType want) {
  CheckDtype(op, name, x, want);
  PD_CHECK(x.shape().size() == 1 && x.shape()[0] == 1, op, ": ", name, " has shape ",
           ShapeStr(x.shape()), ", expected [1]");
}

inline void CheckSamePlace(const char* op, const char* name, const paddle::Tensor& x,
                           const paddle::Tensor& ref, const char* ref_name) {
  PD_CHECK(x.place() == ref.place(), op, ": ", name, " is on ", x.place().DebugString(),
           " but ", ref_name, " is on ", ref.place().DebugString(),
           "; all inputs must be on one device");
}

// Values of an op's output prefix sum (CPU kernels only: on a GPU these are device values, which
// the host cannot read without a sync, so the CUDA kernels bound their accesses instead). The
// rows tensor (`rows_name`, `rows` rows) may be a fixed-capacity buffer, but it must hold the
// T_out = cu[bsz] rows the index describes, or a slot's rows past the tensor would be silently
// skipped: cu starts at 0, never decreases, and cu[bsz] <= rows. A tensor with no rows at all
// stays a no-op whatever cu says (the ops' existing contract for an empty call: nothing is
// visited, so nothing is skipped silently). A row whose batch id is -1 is skipped by design; a
// row with a slot id must lie in that slot's range, which the op checks per row.
inline void CheckOutputRows(const char* op, const char* rows_name, int64_t rows, const int32_t* cu,
                            int64_t bsz) {
  PD_CHECK(cu[0] == 0, op, ": cu_seqlens_q_output[0] = ", cu[0],
           ", expected 0 (an exclusive prefix sum)");
  for (int64_t b = 0; b < bsz; ++b) {
    PD_CHECK(cu[b + 1] >= cu[b], op, ": cu_seqlens_q_output[", b + 1, "] = ", cu[b + 1],
             " < cu_seqlens_q_output[", b, "] = ", cu[b], ", expected a non-decreasing prefix sum");
  }
  PD_CHECK(rows == 0 || cu[bsz] <= rows, op, ": cu_seqlens_q_output[bsz = ", bsz, "] = ", cu[bsz],
           " output rows but ", rows_name, " has ", rows,
           " rows; expected cu_seqlens_q_output[bsz] <= rows");
}

// Optional inputs that only make sense together are given together or not at all.
inline void CheckPaired(const char* op, const char* a_name,
                        const paddle::optional<paddle::Tensor>& a, const char* b_name,
                        const paddle::optional<paddle::Tensor>& b) {
  PD_CHECK(a.is_initialized() == b.is_initialized(), op, ": ", a_name, " and ", b_name,
           " must be given together or both omitted (got ", a_name, "=",
           a ? "given" : "None", ", ", b_name, "=", b ? "given" : "None", ")");
}

}  // namespace specworker

#ifdef SPECWORKER_WITH_CUDA
#include <cuda_runtime.h>
// Turns a launcher's cudaError_t (returned as int) into an error naming the op.
#define SPECWORKER_CHECK_LAUNCH(op, err)                                          \
  PD_CHECK((err) == 0, op, ": CUDA launch failed: ",                              \
           cudaGetErrorString(static_cast<cudaError_t>(err)))
#endif
