// Grouped bf16 GEMMs through cuBLAS (cublasGemmGroupedBatchedEx: every group in one call, the
// library spreading their tiles over the GPU): the MoE experts' GEMMs of long prefills, where our
// mma.sync grouped kernel (moe.cu) runs at about a third of the tensor cores' rate. The row counts
// must be known on the host, so a caller pays one host sync to learn them.
#pragma once

#include <cstdint>
#include <span>

#include "core/device_context.h"
#include "core/status.h"

namespace uniprefill::ops::cuda {

// One group: c [m, n] = a [m, k] @ b [n, k]^T, bf16 row-major with the shared row strides below,
// f32 accumulation. m may be 0 (the group is skipped).
struct GroupedGemmGroup {
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  int m = 0;
};

// The groups' shared shape: n output columns, k inner, and row strides in elements.
struct GroupedGemmShape {
  int n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
};

// Bytes of device scratch GroupedGemmBf16 needs for `groups` groups (its pointer arrays).
size_t GroupedGemmScratchBytes(int64_t groups);

// Every group's GEMM on ctx's stream. scratch: device memory of GroupedGemmScratchBytes(groups),
// 16-byte aligned; the pointer arrays are copied into it from the host (pageable: the copy is
// done when this returns, so the host arrays may go).
Status GroupedGemmBf16(DeviceContext& ctx, std::span<const GroupedGemmGroup> groups,
                       const GroupedGemmShape& shape, void* scratch);

}  // namespace uniprefill::ops::cuda
