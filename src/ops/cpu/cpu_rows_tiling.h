// The loop order the batched-rows Linear paths share (cpu_linear_int16_rows.h,
// cpu_linear_int8_rows.h): threads split the output columns; within a thread, a tile of weight
// rows is multiplied into every group of activation rows of a chunk while it is in cache, so the
// weights stream from memory once per chunk of rows.
// Non-goals: anything about the kernels or the activation format (the callback's business).
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/device_context.h"

namespace uniprefill::ops::cpu {

// Weight rows multiplied into a chunk of activation rows before the next tile: 16 rows of the
// widest layer here (2048 Q8_0 inputs, 2.2 KB a row) stay in L1 next to a group of activation
// rows; a chunk of 64 quantised rows (256 KB of int16 at 2048 inputs) stays in L2 while every
// tile of the thread's columns passes (prefill: the layer's weights come from L3 once per chunk).
inline constexpr int64_t kRowsWeightTile = 16;
inline constexpr int64_t kRowsChunk = 64;

// fn(o0, o1, t0, nx) for every tile of output columns [o0, o1) (of `cols`) and group of
// activation rows [t0, t0 + nx) (of `rows`, nx <= group), in the order above, on ctx's pool.
template <typename Fn>
void ForEachRowsTile(DeviceContext& ctx, int64_t rows, int64_t cols, int group, const Fn& fn) {
  ctx.pool().ParallelFor(cols, kRowsWeightTile, [&](int64_t begin, int64_t end, int) {
    for (int64_t c0 = 0; c0 < rows; c0 += kRowsChunk) {
      const int64_t c1 = std::min(rows, c0 + kRowsChunk);
      for (int64_t o0 = begin; o0 < end; o0 += kRowsWeightTile) {
        const int64_t o1 = std::min(end, o0 + kRowsWeightTile);
        for (int64_t t0 = c0; t0 < c1; t0 += group) {
          fn(o0, o1, t0, static_cast<int>(std::min<int64_t>(group, c1 - t0)));
        }
      }
    }
  });
}

}  // namespace uniprefill::ops::cpu
