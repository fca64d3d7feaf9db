// Op dispatch: the one place that picks a backend from ctx.device(). The CUDA backend (a later
// issue) adds its branch here.
#include "ops/ops.h"

#include <cassert>
#include <cmath>

#include "ops/cpu/cpu_ops.h"

namespace uniprefill::ops {

void Linear(DeviceContext& ctx, TensorView out, TensorView x, const LinearWeight& w) {
  assert(ctx.device() == Device::kCpu);
  cpu::Linear(ctx, out, x, w);
}

void RmsNorm(DeviceContext& ctx, TensorView out, TensorView x, const float* weight, float eps) {
  assert(ctx.device() == Device::kCpu);
  cpu::RmsNorm(ctx, out, x, weight, eps);
}

void Rope(DeviceContext& ctx, TensorView x, const int32_t* pos, const float* inv_freq, int rot_dims,
          RopeStyle style) {
  assert(ctx.device() == Device::kCpu);
  cpu::Rope(ctx, x, pos, inv_freq, rot_dims, style);
}

std::vector<float> RopeInvFreq(double theta, int rot_dims) {
  // Like HF: 1 / theta ** (arange(0, rot, 2).float() / rot), every step in f32.
  std::vector<float> inv(rot_dims / 2);
  for (int i = 0; i < rot_dims / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(rot_dims);
    inv[i] = 1.0f / std::pow(static_cast<float>(theta), e);
  }
  return inv;
}

void GatedActivation(DeviceContext& ctx, TensorView out, TensorView gate, TensorView up,
                     Activation act) {
  assert(ctx.device() == Device::kCpu);
  cpu::GatedActivation(ctx, out, gate, up, act);
}

void Embedding(DeviceContext& ctx, TensorView out, TensorView table, const int32_t* ids,
               float scale) {
  assert(ctx.device() == Device::kCpu);
  cpu::Embedding(ctx, out, table, ids, scale);
}

void Add(DeviceContext& ctx, TensorView out, TensorView a, TensorView b) {
  assert(ctx.device() == Device::kCpu);
  cpu::Add(ctx, out, a, b);
}

void Attention(DeviceContext& ctx, TensorView out, TensorView q, TensorView k, TensorView v,
               const int32_t* q_pos, const int32_t* k_pos, const AttentionParams& params) {
  assert(ctx.device() == Device::kCpu);
  cpu::Attention(ctx, out, q, k, v, q_pos, k_pos, params);
}

void AttentionPaged(DeviceContext& ctx, TensorView out, TensorView q,
                    const std::vector<KvRun>& runs, const int32_t* q_pos, const int32_t* k_pos,
                    const AttentionParams& params) {
  assert(ctx.device() == Device::kCpu);
  cpu::AttentionPaged(ctx, out, q, runs, q_pos, k_pos, params);
}

void AttentionPagedBatch(DeviceContext& ctx, const std::vector<PagedAttentionSeq>& seqs,
                         const AttentionParams& params) {
  assert(ctx.device() == Device::kCpu);
  cpu::AttentionPagedBatch(ctx, seqs, params);
}

void AttentionImportance(DeviceContext& ctx, float* importance, TensorView q, TensorView k,
                         const int32_t* q_pos, const int32_t* k_pos, float scale) {
  assert(ctx.device() == Device::kCpu);
  cpu::AttentionImportance(ctx, importance, q, k, q_pos, k_pos, scale);
}

void GatherRows(DeviceContext& ctx, TensorView out, TensorView x, const int32_t* rows) {
  assert(ctx.device() == Device::kCpu);
  cpu::GatherRows(ctx, out, x, rows);
}

}  // namespace uniprefill::ops
