#include "model/blocks/moe.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/buffer.h"

namespace uniprefill {
namespace {

// Rows of a contiguous f32 buffer as [rows, cols] with row stride `stride`, from column `col`.
TensorView Rows(const Buffer& b, int64_t rows, int64_t cols, int64_t stride, int64_t col = 0) {
  TensorView v = TensorView::Contiguous(b.as<float>() + col, DType::kF32, {rows, cols});
  v.stride[0] = stride;
  return v;
}

// out f32 [n, H] = down(silu(gate(x)) * up(x)) for x f32 [n, H]; gu is scratch for [n, 2 I].
void SwiGlu(DeviceContext& ctx, TensorView out, TensorView x, const ops::LinearWeight& gate_up,
            const ops::LinearWeight& down, Buffer& gu) {
  const int64_t n = x.dim(0), two_i = gate_up.out_features, inter = two_i / 2;
  assert(down.in_features == inter);
  ops::Linear(ctx, Rows(gu, n, two_i, two_i), x, gate_up);
  const TensorView gate = Rows(gu, n, inter, two_i), up = Rows(gu, n, inter, two_i, inter);
  ops::GatedActivation(ctx, gate, gate, up, ops::Activation::kSilu);
  ops::Linear(ctx, out, gate, down);
}

}  // namespace

std::vector<ExpertChoice> RouteRow(const float* logits, int n_experts, int top_k,
                                   bool norm_topk_prob) {
  assert(top_k >= 1 && top_k <= n_experts);
  // Softmax over all experts in f32, as transformers' router.
  std::vector<float> p(logits, logits + n_experts);
  const float mx = *std::max_element(p.begin(), p.end());
  float sum = 0.0f;
  for (float& x : p) {
    x = std::exp(x - mx);
    sum += x;
  }
  for (float& x : p) x /= sum;
  std::vector<int> idx(n_experts);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + top_k, idx.end(),
                    [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  idx.resize(top_k);
  std::sort(idx.begin(), idx.end());
  float top_sum = 0.0f;
  for (int e : idx) top_sum += p[e];
  std::vector<ExpertChoice> choice;
  choice.reserve(top_k);
  for (int e : idx) choice.push_back({e, norm_topk_prob ? p[e] / top_sum : p[e]});
  return choice;
}

void MoeForward(DeviceContext& ctx, const MoeWeights& w, TensorView x, TensorView out) {
  const int64_t T = x.dim(0), H = x.dim(1), E = w.n_experts;
  const int64_t first = w.first_expert, local = static_cast<int64_t>(w.expert_gate_up.size());
  assert(w.router.out_features == E && first >= 0 && first + local <= E &&
         static_cast<int64_t>(w.expert_down.size()) == local);
  assert(out.dim(0) == T && out.dim(1) == H && out.data != x.data);
  if (T == 0) return;

  // Routing: each row's experts, then every expert's rows (ascending) with their weights.
  Buffer logits(sizeof(float) * T * E);  // f32 [T, E]
  ops::Linear(ctx, logits.View(DType::kF32, {T, E}), x, w.router);
  std::vector<std::vector<ExpertChoice>> routes(T);
  ctx.pool().ParallelFor(T, 16, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      routes[t] =
          RouteRow(logits.as<float>() + t * E, static_cast<int>(E), w.top_k, w.norm_topk_prob);
    }
  });
  // Indexed by local expert: rows routed to another rank's experts are skipped here.
  std::vector<std::vector<int64_t>> expert_rows(local);
  std::vector<std::vector<float>> expert_weights(local);
  for (int64_t t = 0; t < T; ++t) {
    for (const ExpertChoice& c : routes[t]) {
      if (c.expert < first || c.expert >= first + local) continue;
      expert_rows[c.expert - first].push_back(t);
      expert_weights[c.expert - first].push_back(c.weight);
    }
  }

  // Experts in ascending index, each as one GEMM pair over its gathered rows, added into out.
  for (int64_t t = 0; t < T; ++t) std::memset(out.row<float>(t), 0, H * sizeof(float));
  size_t max_rows = 0;
  int64_t max_two_i = w.shared_gate_up.out_features;
  for (int64_t e = 0; e < local; ++e) {
    max_rows = std::max(max_rows, expert_rows[e].size());
    max_two_i = std::max(max_two_i, w.expert_gate_up[e].out_features);
  }
  const int64_t cap = static_cast<int64_t>(std::max<size_t>(max_rows, T));
  Buffer xg(sizeof(float) * max_rows * H);     // f32 [n_e, H]: the expert's rows of x
  Buffer y(sizeof(float) * cap * H);           // f32 [n_e, H]: their expert outputs
  Buffer gu(sizeof(float) * cap * max_two_i);  // f32 [n_e, 2 I]
  for (int64_t e = 0; e < local; ++e) {
    const std::vector<int64_t>& rows = expert_rows[e];
    const int64_t n = static_cast<int64_t>(rows.size());
    if (n == 0) continue;
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(xg.as<float>() + i * H, x.row<float>(rows[i]), H * sizeof(float));
    }
    SwiGlu(ctx, Rows(y, n, H, H), Rows(xg, n, H, H), w.expert_gate_up[e], w.expert_down[e], gu);
    const float* wt = expert_weights[e].data();
    ctx.pool().ParallelFor(n, std::max<int64_t>(1, 8192 / H), [&](int64_t i0, int64_t i1, int) {
      for (int64_t i = i0; i < i1; ++i) {
        float* o = out.row<float>(rows[i]);
        const float* yr = y.as<float>() + i * H;
        for (int64_t d = 0; d < H; ++d) o[d] += wt[i] * yr[d];
      }
    });
  }

  // The shared expert, gated per row by sigmoid(shared_expert_gate(x)), added last. The gate is
  // one scalar per row (replicated under tensor parallelism), so scaling each rank's partial
  // shared-expert sum by it and all-reducing equals scaling the whole sum.
  Buffer gate(sizeof(float) * T);  // f32 [T, 1]
  ops::Linear(ctx, gate.View(DType::kF32, {T, 1}), x, w.shared_expert_gate);
  SwiGlu(ctx, Rows(y, T, H, H), x, w.shared_gate_up, w.shared_down, gu);
  ctx.pool().ParallelFor(T, std::max<int64_t>(1, 8192 / H), [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      const float s = 1.0f / (1.0f + std::exp(-gate.as<float>()[t]));
      float* o = out.row<float>(t);
      const float* yr = y.as<float>() + t * H;
      for (int64_t d = 0; d < H; ++d) o[d] += s * yr[d];
    }
  });
}

}  // namespace uniprefill
