// Rows of cached keys / values in the cache's element type: f32, or f16 (half the bytes a
// decode step streams per cached token; the engine's default for CPU caches, as llama.cpp's
// default cache type). Converting
// writes and reads live here so caches, the attention block and the attention kernel agree.
// F16C (the build's baseline, -mf16c) converts 8 values per instruction; f32 -> f16 rounds to
// nearest even and clamps to +-65504, so a key or value past f16's range saturates instead of
// becoming infinite.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace uniprefill {

// Bytes of one cached K (or V) element of dtype kF32 or kF16.
inline int KvElementBytes(DType kv_dtype) { return kv_dtype == DType::kF16 ? 2 : 4; }

// dst (kv_dtype) [n] = src f32 [n].
void StoreKvValues(void* dst, DType kv_dtype, const float* src, int64_t n);
// dst f32 [n] = src (kv_dtype) [n].
void LoadKvValues(float* dst, const void* src, DType kv_dtype, int64_t n);

}  // namespace uniprefill
