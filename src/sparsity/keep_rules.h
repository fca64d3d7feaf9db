// UniPrefill's keep rules as plain formulas, shared by the host selection (token_selection.cc),
// the device selection (ops/cuda/token_selection.cu) and the sync-free drop's capacities, so the
// backends cannot drift apart (docs/design.md section 1).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace uniprefill::sparsity {

// A prompt of n_tokens alive tokens keeps all of them: it is no longer than the sink plus the
// observation window, or the mode keeps everything (top-p with p >= 1, a ratio >= 1).
UP_HOST_DEVICE inline bool KeepsAll(int64_t n_tokens, int sink, int last_n, bool fixed_ratio,
                                    float top_p, float keep_ratio) {
  return n_tokens <= static_cast<int64_t>(sink) + last_n || (!fixed_ratio && top_p >= 1.0f) ||
         (fixed_ratio && keep_ratio >= 1.0f);
}

// The fixed-ratio mode's block count out of n_blocks >= 1: floor(ratio * blocks) (the product
// rounded to f32 as the reference computes it, then + 1e-9 in double), at least one, at most all.
UP_HOST_DEVICE inline int64_t FixedKeepBlocks(int64_t n_blocks, float keep_ratio) {
#if defined(__CUDA_ARCH__)
  const float product = __fmul_rn(keep_ratio, static_cast<float>(n_blocks));
#else
  const float product = keep_ratio * static_cast<float>(n_blocks);
#endif
  const int64_t keep = static_cast<int64_t>(floor(static_cast<double>(product) + 1e-9));
  return keep < 1 ? 1 : (keep > n_blocks ? n_blocks : keep);
}

// The sync-free drop's bounds (no host sync learns the kept count). The kept count of any
// fixed-ratio selection over at most `capacity` tokens is at most this many: min(N, kept blocks x G
// + S + n), and the kept block count never falls as N grows.
UP_HOST_DEVICE inline int64_t FixedRatioCapacity(int64_t capacity, int block_size, int sink,
                                                int last_n, float keep_ratio) {
  const int64_t always = static_cast<int64_t>(sink) + last_n;
  if (capacity <= always || keep_ratio >= 1.0f) return capacity;  // keeps everything
  const int64_t n_blocks = (capacity + block_size - 1) / block_size;
  const int64_t bound = FixedKeepBlocks(n_blocks, keep_ratio) * block_size + always;
  return bound < capacity ? bound : capacity;
}

// And at least this many of any segment of at least `minimum` tokens: N <= S + n keeps all N (>=
// minimum); a longer N keeps the disjoint sink and window and its chosen blocks (never fewer than
// for `minimum` tokens), all whole but the last.
UP_HOST_DEVICE inline int64_t FixedRatioMinimum(int64_t minimum, int block_size, int sink,
                                               int last_n, float keep_ratio) {
  const int64_t always = static_cast<int64_t>(sink) + last_n;
  if (minimum <= always || keep_ratio >= 1.0f) return minimum;
  const int64_t n_blocks = (minimum + block_size - 1) / block_size;
  const int64_t chosen = (FixedKeepBlocks(n_blocks, keep_ratio) - 1) * block_size + 1;
  return chosen > always ? chosen : always;
}

}  // namespace uniprefill::sparsity
