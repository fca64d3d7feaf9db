// TransposeRowsI16 (cpu_quant_lanes_i16.h): baseline flags; once per call and 16 rows, a pass over
// the rows' int16 values per layout the call's kernels read, small next to the kernels' work.
#include "ops/cpu/cpu_quant_lanes_i16.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace uniprefill::ops::cpu {

std::vector<int16_t> BlockQuantSums(const uint8_t* q8_0_rows, int64_t rows, int64_t n) {
  constexpr int64_t kBlockBytes = 34;  // f16 scale, 32 int8 quants
  const int64_t blocks = n / 32;
  std::vector<int16_t> sums(rows * blocks);
  for (int64_t b = 0; b < rows * blocks; ++b) {
    const auto* q = reinterpret_cast<const int8_t*>(q8_0_rows + b * kBlockBytes + 2);
    int sum = 0;
    for (int i = 0; i < 32; ++i) sum += q[i];
    sums[b] = static_cast<int16_t>(sum);
  }
  return sums;
}

void AttachBlockQuantSums(LinearWeight& w, CpuIsa isa) {
  w.block_quant_sums.clear();
  if (!w.int16_decode_activations || w.in_features % 32 != 0 ||
      FusedQuantDotI16Lanes(DType::kQ8_0, isa) == nullptr) {
    return;
  }
  bool any = false;
  std::vector<std::vector<int16_t>> sums(w.parts.size());
  for (size_t p = 0; p < w.parts.size(); ++p) {
    const TensorView& part = w.parts[p];
    if (part.dtype != DType::kQ8_0 || part.stride[0] != part.dim(1)) continue;
    sums[p] = BlockQuantSums(static_cast<const uint8_t*>(part.data), part.dim(0), part.dim(1));
    any = true;
  }
  if (any) w.block_quant_sums = std::move(sums);
}

I16LanesLayout I16LanesLayoutOf(DType type) {
  return type == DType::kQ8_0 ? kI16LanesBytes : kI16LanesPairs;
}

void TransposeRowsI16(const I16Rows& x, int nx, int64_t n, I16LanesBuffer* lanes,
                      unsigned layouts) {
  assert(nx >= 1 && nx <= kI16Lanes && n % 32 == 0);
  const int64_t pairs = n / 2, groups = (n + kI16ScaleGroup - 1) / kI16ScaleGroup;
  const bool want_pairs = (layouts & kI16LanesPairs) != 0;
  const bool want_bytes = (layouts & kI16LanesBytes) != 0;
  lanes->xq.assign(want_pairs ? pairs * kI16Lanes : 0, 0);
  lanes->xb.assign(want_bytes ? n / 4 * 2 * kI16Lanes : 0, 0);
  lanes->scale.assign(groups * kI16Lanes, 0.0f);
  for (int r = 0; r < nx; ++r) {
    const int16_t* row = x.xq + r * x.xq_stride;
    for (int64_t k = 0; want_pairs && k < pairs; ++k) {
      int32_t pair;  // row[2k] in the low word, row[2k + 1] in the high one (little endian)
      std::memcpy(&pair, row + 2 * k, sizeof(pair));
      lanes->xq[k * kI16Lanes + r] = pair;
    }
    for (int64_t k = 0; want_bytes && k < n / 4; ++k) {
      uint32_t lo = 0, hi = 0;
      for (int e = 0; e < 4; ++e) {
        const auto u = static_cast<uint16_t>(static_cast<int32_t>(row[4 * k + e]) + 32768);
        lo |= uint32_t{static_cast<uint8_t>(u & 0xff)} << (8 * e);
        hi |= uint32_t{static_cast<uint8_t>(u >> 8)} << (8 * e);
      }
      lanes->xb[(2 * k) * kI16Lanes + r] = lo;
      lanes->xb[(2 * k + 1) * kI16Lanes + r] = hi;
    }
    for (int64_t g = 0; g < groups; ++g) {
      lanes->scale[g * kI16Lanes + r] = x.scale[r * x.scale_stride + g];
    }
  }
}

}  // namespace uniprefill::ops::cpu
