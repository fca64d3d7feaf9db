// Element types: plain floats and integers, and the GGML block-quantised weight formats.
//
// The numeric values of the quantised types equal their GGML type ids, so a GGUF tensor's type field
// maps onto DType directly. A quantised type stores `block_elems` elements in `block_bytes` bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace uniprefill {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kBF16 = 30,
  // Engine-internal types (not GGML ids that this engine reads).
  kI32 = 1000,
  kI64 = 1001,
};

struct DTypeInfo {
  const char* name;
  int64_t block_elems;  // 1 for scalar types
  int64_t block_bytes;  // bytes per block
  bool dequantizable;   // this engine can turn it into f32
};

// Info for a known type; nullopt for an id this engine does not know (e.g. from a GGUF file).
std::optional<DTypeInfo> GetDTypeInfo(uint32_t type_id);
const char* DTypeName(DType t);

// Bytes used by `n_elems` elements of `t` (n_elems must be a multiple of the block size).
int64_t DTypeBytes(DType t, int64_t n_elems);
inline bool IsQuantized(DType t) {
  return t != DType::kF32 && t != DType::kF16 && t != DType::kBF16 && t != DType::kI32 &&
         t != DType::kI64;
}

}  // namespace uniprefill
