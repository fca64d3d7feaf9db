#include "dist/weight_shards.h"

#include <algorithm>
#include <cstring>

namespace uniprefill::dist {
namespace {

Status CheckSliceable(const ops::LinearWeight& w, const char* what) {
  if (w.is_random()) {
    return Unimplemented(std::string(what) + ": random-weight presets cannot be sliced yet");
  }
  if (w.parts.empty()) return InvalidArgument(std::string(what) + ": the weight has no parts");
  return OkStatus();
}

ops::LinearWeight EmptyLike(const ops::LinearWeight& w) {
  ops::LinearWeight out;
  out.int16_decode_activations = w.int16_decode_activations;
  out.int8_rows_activations = w.int8_rows_activations;
  out.bf16_prefill_gemm = w.bf16_prefill_gemm;
  return out;
}

}  // namespace

Result<ops::LinearWeight> SliceOutputRows(const ops::LinearWeight& w, int64_t begin,
                                          int64_t end) {
  UP_RETURN_IF_ERROR(CheckSliceable(w, "SliceOutputRows"));
  if (begin < 0 || end > w.out_features || begin >= end) {
    return InvalidArgument("SliceOutputRows: rows [" + std::to_string(begin) + ", " +
                           std::to_string(end) + ") outside the weight's " +
                           std::to_string(w.out_features));
  }
  ops::LinearWeight out = EmptyLike(w);
  out.in_features = w.in_features;
  int64_t row = 0;  // first row of the current part
  for (const TensorView& part : w.parts) {
    const int64_t lo = std::max(begin, row), hi = std::min(end, row + part.dim(0));
    if (lo < hi) {
      out.parts.push_back(part.Slice0(lo - row, hi - lo));
      out.out_features += hi - lo;
    }
    row += part.dim(0);
  }
  return out;
}

Result<ops::LinearWeight> SliceInputColumns(const ops::LinearWeight& w, int64_t begin, int64_t end,
                                            std::vector<Buffer>* storage) {
  UP_RETURN_IF_ERROR(CheckSliceable(w, "SliceInputColumns"));
  if (begin < 0 || end > w.in_features || begin >= end) {
    return InvalidArgument("SliceInputColumns: columns [" + std::to_string(begin) + ", " +
                           std::to_string(end) + ") outside the weight's " +
                           std::to_string(w.in_features));
  }
  ops::LinearWeight out = EmptyLike(w);
  out.in_features = end - begin;
  out.out_features = w.out_features;
  for (const TensorView& part : w.parts) {
    const auto info = GetDTypeInfo(static_cast<uint32_t>(part.dtype));
    if (!info) return InvalidArgument("SliceInputColumns: unknown weight type");
    if (begin % info->block_elems != 0 || end % info->block_elems != 0) {
      return InvalidArgument("SliceInputColumns: columns [" + std::to_string(begin) + ", " +
                             std::to_string(end) + ") cut " + DTypeName(part.dtype) +
                             " blocks of " + std::to_string(info->block_elems) + " elements");
    }
    const int64_t rows = part.dim(0);
    const int64_t row_stride_bytes = DTypeBytes(part.dtype, part.stride[0]);
    const int64_t skip = DTypeBytes(part.dtype, begin);
    const int64_t take = DTypeBytes(part.dtype, end - begin);
    storage->emplace_back(static_cast<size_t>(rows * take));
    char* dst = static_cast<char*>(storage->back().data());
    const char* src = static_cast<const char*>(part.data);
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(dst + r * take, src + r * row_stride_bytes + skip, static_cast<size_t>(take));
    }
    out.parts.push_back(TensorView::Contiguous(dst, part.dtype, {rows, end - begin}));
  }
  return out;
}

}  // namespace uniprefill::dist
