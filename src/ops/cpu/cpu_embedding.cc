// Embedding: dequantise the selected table rows (any dequantisable dtype) straight into `out`,
// then scale. Tokens split over the pool for long prompts.
#include <cassert>

#include "io/dequant.h"
#include "ops/cpu/cpu_ops.h"

namespace uniprefill::ops::cpu {

void Embedding(DeviceContext& ctx, TensorView out, TensorView table, const int32_t* ids,
               float scale) {
  const int64_t D = table.dim(1);
  assert(out.dim(1) == D);
  const int64_t row_bytes = DTypeBytes(table.dtype, table.stride[0]);
  ctx.pool().ParallelFor(out.dim(0), 16, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      assert(ids[t] >= 0 && ids[t] < table.dim(0));
      float* o = out.row<float>(t);
      const Status s =
          Dequantize(table.dtype, static_cast<const char*>(table.data) + ids[t] * row_bytes, o, D);
      assert(s.ok());
      (void)s;
      for (int64_t i = 0; i < D; ++i) o[i] *= scale;
    }
  });
}

}  // namespace uniprefill::ops::cpu
