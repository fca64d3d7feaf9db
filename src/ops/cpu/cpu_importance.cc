// UniPrefill attention importance on the CPU.
//
// Per query head h: S = scale * Q_h K_kv(h)^T, f32 [n, N], by one PoolSgemm reading q and k in
// place (strided). Then per query row: the visible keys are a prefix [0, hi_j) (k_pos ascending),
// softmax over it in fp32 with the vectorised Exp, and the probabilities are added into a per-thread
// importance partial. Partials are summed in thread order at the end, so the result does not depend
// on scheduling. n is small (the observation window, 128), so S for one head is n * N floats
// (8 MiB at N = 16K); heads run one after another.
#include <algorithm>
#include <cmath>
#include <cassert>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/cpu/cpu_math.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/cpu_sgemm.h"

namespace uniprefill::ops::cpu {

void AttentionImportance(DeviceContext& ctx, float* importance, TensorView q, TensorView k,
                         const int32_t* q_pos, const int32_t* k_pos, float scale) {
  const int64_t n = q.dim(0), hq = q.dim(1), d = q.dim(2);
  const int64_t N = k.dim(0), hkv = k.dim(1);
  assert(k.dim(2) == d && hq % hkv == 0);
  if (n == 0 || N == 0) return;
  const int64_t group = hq / hkv;
  std::vector<int64_t> hi(n);  // visible keys of query j: [0, hi[j])
  for (int64_t j = 0; j < n; ++j) {
    hi[j] = std::upper_bound(k_pos, k_pos + N, q_pos[j]) - k_pos;
  }
  const int threads = ctx.threads();
  std::vector<float> s(static_cast<size_t>(n) * N);
  std::vector<std::vector<float>> partial(threads, std::vector<float>(N, 0.0f));
  for (int64_t h = 0; h < hq; ++h) {
    const float* qh = q.as<float>() + h * d;
    const float* kh = k.as<float>() + (h / group) * d;
    PoolSgemm(ctx, n, N, d, scale, qh, q.stride[0], kh, k.stride[0], s.data(), N);
    ctx.pool().ParallelFor(n, 1, [&](int64_t b, int64_t e, int tid) {
      float* acc = partial[tid].data();
      for (int64_t j = b; j < e; ++j) {
        float* row = s.data() + j * N;
        const int64_t len = hi[j];
        if (len == 0) continue;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < len; ++i) mx = std::max(mx, row[i]);
        const __m256 mv = _mm256_set1_ps(mx);
        __m256 sum8 = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i + 8 <= len; i += 8) {
          const __m256 ev = Exp(_mm256_sub_ps(_mm256_loadu_ps(row + i), mv));
          _mm256_storeu_ps(row + i, ev);
          sum8 = _mm256_add_ps(sum8, ev);
        }
        float sum = HorizontalSum(sum8);
        for (; i < len; ++i) {
          row[i] = std::exp(row[i] - mx);
          sum += row[i];
        }
        const __m256 inv = _mm256_set1_ps(1.0f / sum);
        i = 0;
        for (; i + 8 <= len; i += 8) {
          _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(_mm256_loadu_ps(row + i), inv,
                                                    _mm256_loadu_ps(acc + i)));
        }
        for (; i < len; ++i) acc[i] += row[i] * (1.0f / sum);
      }
    });
  }
  for (int t = 0; t < threads; ++t) {
    for (int64_t i = 0; i < N; ++i) importance[i] += partial[t][i];
  }
}

void GatherRows(DeviceContext& ctx, TensorView out, TensorView x, const int32_t* rows) {
  const int64_t r = out.dim(0), d = out.dim(1);
  assert(x.dim(1) == d);
  ctx.pool().ParallelFor(r, 64, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      std::memcpy(out.row<float>(i), x.row<float>(rows[i]), sizeof(float) * d);
    }
  });
}

}  // namespace uniprefill::ops::cpu
