#include "core/dtype.h"

namespace uniprefill {

std::optional<DTypeInfo> GetDTypeInfo(uint32_t type_id) {
  switch (static_cast<DType>(type_id)) {
    case DType::kF32: return DTypeInfo{"F32", 1, 4, true};
    case DType::kF16: return DTypeInfo{"F16", 1, 2, true};
    case DType::kBF16: return DTypeInfo{"BF16", 1, 2, true};
    case DType::kQ4_0: return DTypeInfo{"Q4_0", 32, 18, true};
    case DType::kQ4_1: return DTypeInfo{"Q4_1", 32, 20, true};
    case DType::kQ5_0: return DTypeInfo{"Q5_0", 32, 22, true};
    case DType::kQ5_1: return DTypeInfo{"Q5_1", 32, 24, true};
    case DType::kQ8_0: return DTypeInfo{"Q8_0", 32, 34, true};
    case DType::kQ2_K: return DTypeInfo{"Q2_K", 256, 84, false};
    case DType::kQ3_K: return DTypeInfo{"Q3_K", 256, 110, false};
    case DType::kQ4_K: return DTypeInfo{"Q4_K", 256, 144, true};
    case DType::kQ5_K: return DTypeInfo{"Q5_K", 256, 176, true};
    case DType::kQ6_K: return DTypeInfo{"Q6_K", 256, 210, true};
    case DType::kQ8_K: return DTypeInfo{"Q8_K", 256, 292, false};
    case DType::kI32: return DTypeInfo{"I32", 1, 4, false};
    case DType::kI64: return DTypeInfo{"I64", 1, 8, false};
  }
  return std::nullopt;
}

const char* DTypeName(DType t) {
  auto info = GetDTypeInfo(static_cast<uint32_t>(t));
  return info ? info->name : "unknown";
}

int64_t DTypeBytes(DType t, int64_t n_elems) {
  auto info = GetDTypeInfo(static_cast<uint32_t>(t));
  if (!info) return -1;
  return n_elems / info->block_elems * info->block_bytes;
}

}  // namespace uniprefill
