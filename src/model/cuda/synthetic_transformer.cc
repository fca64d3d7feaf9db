#include "model/cuda/synthetic_transformer.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "ops/cuda/cuda_attention.h"
#include "backend/cuda/cuda_glue_kernels.h"
#include "backend/cuda/device_views.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "ops/cuda/cuda_linear_attention.h"
#include "ops/cuda/cuda_moe.h"
#include "ops/cuda/cuda_uniprefill.h"

namespace uniprefill {

namespace {

// Weights of one layer's linear maps (no norms, no conv), which are also its FLOPs / 2 per token
// for everything but the MoE experts (of which only top_k run per token).
struct LayerLinear {
  int64_t mixer = 0;          // attention q(+gate)/k/v/o or DeltaNet in/out projections
  int64_t ffn_per_token = 0;  // FFN weights one token multiplies by
  int64_t ffn_stored = 0;     // FFN weights stored
};

LayerLinear LayerLinearOf(const SyntheticShape& s, int l) {
  LayerLinear r;
  const int64_t h = s.hidden;
  if (s.IsLinearAttention(l)) {
    const int64_t kd = static_cast<int64_t>(s.lin_k_heads) * s.lin_head_dim;
    const int64_t vd = static_cast<int64_t>(s.lin_v_heads) * s.lin_head_dim;
    r.mixer = h * (2 * kd + 2 * vd + 2 * s.lin_v_heads) + vd * h;
  } else {
    const int64_t q = static_cast<int64_t>(s.n_heads) * s.head_dim;
    const int64_t kv = static_cast<int64_t>(s.n_kv_heads) * s.head_dim;
    r.mixer = h * (q * (s.attn_output_gate ? 2 : 1) + 2 * kv) + q * h;
  }
  if (s.n_experts > 0) {
    const int64_t expert = 3 * h * s.moe_intermediate, shared = 3 * h * s.shared_intermediate;
    r.ffn_per_token = h * s.n_experts + s.top_k * expert + shared + h;
    r.ffn_stored = h * s.n_experts + s.n_experts * expert + shared + h;
  } else {
    r.ffn_per_token = r.ffn_stored = 3 * h * s.intermediate;
  }
  return r;
}

}  // namespace

int64_t SyntheticShape::Parameters() const {
  int64_t p = static_cast<int64_t>(vocab) * hidden;
  for (int l = 0; l < n_layers; ++l) {
    const LayerLinear ll = LayerLinearOf(*this, l);
    p += ll.mixer + ll.ffn_stored;
    if (IsLinearAttention(l)) {
      p += static_cast<int64_t>(2 * lin_k_heads + lin_v_heads) * lin_head_dim * conv_kernel;
    }
  }
  return p;
}

double SyntheticShape::LinearPrefillFlops(int64_t n) const {
  double per_token = 0;
  for (int l = 0; l < n_layers; ++l) {
    const LayerLinear ll = LayerLinearOf(*this, l);
    per_token += 2.0 * (ll.mixer + ll.ffn_per_token);
    if (IsLinearAttention(l)) {
      const double conv_dim = static_cast<double>(2 * lin_k_heads + lin_v_heads) * lin_head_dim;
      per_token += 2.0 * conv_kernel * conv_dim +
                   6.0 * lin_v_heads * static_cast<double>(lin_head_dim) * lin_head_dim;
    }
  }
  return per_token * n;
}

double SyntheticShape::DensePrefillFlops(int64_t n) const {
  // Same convention as shared/bench/pytorch_anchor.py: linear layers + causal attention (QK^T and
  // PV, 4 * H * D per visible pair); embedding, norms and the last token's logits are not counted.
  double flops = LinearPrefillFlops(n);
  const double nn = static_cast<double>(n);
  for (int l = 0; l < n_layers; ++l) {
    if (IsLinearAttention(l)) continue;
    double pairs = nn * (nn + 1) / 2;  // causal
    if (!IsFullAttention(l) && n > sliding_window) {
      const double w = sliding_window;
      pairs = w * (w + 1) / 2 + (nn - w) * w;
    }
    flops += 4.0 * n_heads * head_dim * pairs;
  }
  return flops;
}

Result<SyntheticShape> SyntheticShapeByName(const std::string& name) {
  SyntheticShape s;
  s.name = name;
  if (name == "llama-3.1-8b") {
    s.n_layers = 32, s.hidden = 4096, s.n_heads = 32, s.n_kv_heads = 8, s.head_dim = 128;
    s.intermediate = 14336, s.vocab = 128256, s.rope_theta = 500000.0f;
    s.drop_layers = {7, 11, 15, 19, 23, 27};
  } else if (name == "gemma-3-12b") {
    s.n_layers = 48, s.hidden = 3840, s.n_heads = 16, s.n_kv_heads = 8, s.head_dim = 256;
    s.intermediate = 15360, s.vocab = 262208, s.rope_theta = 1000000.0f;
    s.qk_norm = true, s.gelu = true, s.sliding_window = 1024, s.full_every = 6;
    s.rope_theta_local = 10000.0f;
    s.drop_layers = {29, 35, 41};
  } else if (name == "qwen3-next-80b-a3b") {
    // Every GEMM shape of the model; 256 of the 512 experts per layer so that the bf16 weights
    // (77 GiB of experts) fit one H200 beside 128K-token activations. Routing stays top-10 (the
    // per-token FLOPs are the model's; each expert sees about twice the real model's rows).
    s.n_layers = 48, s.hidden = 2048, s.n_heads = 16, s.n_kv_heads = 2, s.head_dim = 256;
    s.vocab = 151936, s.rope_theta = 10000000.0f, s.qk_norm = true, s.full_every = 4;
    s.attn_output_gate = true, s.rotary_dims = 64;
    s.linear_attention = true, s.lin_k_heads = 16, s.lin_v_heads = 32, s.lin_head_dim = 128;
    s.conv_kernel = 4;
    s.n_experts = 256, s.top_k = 10, s.moe_intermediate = 512, s.shared_intermediate = 512;
    s.drop_layers = {7, 11, 15, 19, 23, 27, 31, 35, 39, 43};
    s.note =
        "Qwen3-Next-80B-A3B layer mix and GEMM shapes (48 layers, 36 Gated DeltaNet + 12 gated "
        "full attention, MoE top-10 of moe_intermediate 512 + shared 512) with 256 of the 512 "
        "experts per layer (bf16 weights must fit one H200); tied embedding/LM head";
  } else if (name == "tiny") {
    s.n_layers = 4, s.hidden = 256, s.n_heads = 4, s.n_kv_heads = 2, s.head_dim = 64;
    s.intermediate = 512, s.vocab = 1000, s.rope_theta = 10000.0f;
    s.drop_layers = {1};
  } else if (name == "tiny-hybrid") {  // a small Qwen3-Next: DeltaNet, gated attention, MoE
    s.n_layers = 8, s.hidden = 256, s.n_heads = 4, s.n_kv_heads = 2, s.head_dim = 64;
    s.vocab = 1000, s.rope_theta = 10000.0f, s.qk_norm = true, s.full_every = 4;
    s.attn_output_gate = true, s.rotary_dims = 16;
    s.linear_attention = true, s.lin_k_heads = 2, s.lin_v_heads = 4, s.lin_head_dim = 64;
    s.n_experts = 8, s.top_k = 2, s.moe_intermediate = 64, s.shared_intermediate = 64;
    s.drop_layers = {3};
  } else {
    return InvalidArgument(
        "unknown synthetic shape '" + name +
        "' (known: llama-3.1-8b, gemma-3-12b, qwen3-next-80b-a3b, tiny, tiny-hybrid)");
  }
  return s;
}

namespace {

using cuda_backend::Bf16;
using cuda_backend::Heads;
using cuda_backend::Rows;

struct LayerWeights {
  // Attention: bf16 [(Hq (x2 with the output gate) + 2 Hkv) D, hidden], rows [q | gate | k | v].
  // DeltaNet: bf16 [2 kd + 2 vd + 2 Hv, hidden], rows [q | k | v | z | b | a].
  DeviceBuffer qkv;
  DeviceBuffer o;        // bf16 [hidden, Hq D] (DeltaNet: [hidden, vd])
  DeviceBuffer gate_up;  // bf16 [2F, hidden]
  DeviceBuffer down;     // bf16 [hidden, F]
  // MoE (n_experts > 0) instead of gate_up / down.
  DeviceBuffer router, experts_gate_up, experts_down, shared_gate_up, shared_down, shared_gate;
};

class SyntheticTransformerImpl final : public SyntheticTransformer {
 public:
  SyntheticTransformerImpl(DeviceContext& ctx, SyntheticShape shape, int64_t max_tokens)
      : ctx_(ctx), shape_(std::move(shape)), max_tokens_(max_tokens) {}
  ~SyntheticTransformerImpl() override {
    if (pinned_) cudaFreeHost(pinned_);
  }

  Status Init(uint64_t seed);
  Result<PrefillTiming> Prefill(const std::vector<int64_t>& prompt_lengths,
                                const UniPrefillRun& uniprefill, uint64_t seed,
                                bool time_attention, std::vector<float>* logits_out) override;
  const SyntheticShape& shape() const override { return shape_; }
  int64_t weight_bytes() const override { return weight_bytes_; }

 private:
  Result<DeviceBuffer> RandomWeight(int64_t n, uint64_t seed, float scale) {
    UP_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(n * 2));
    ops::cuda::FillRandomBf16(ctx_, b.data(), n, seed, scale);
    weight_bytes_ += n * 2;
    return b;
  }

  DeviceContext& ctx_;
  SyntheticShape shape_;
  int64_t max_tokens_;
  int64_t weight_bytes_ = 0;
  int max_batch_ = 256;

  DeviceBuffer embedding_;  // bf16 [V, hidden] (also the tied LM head)
  std::vector<LayerWeights> layers_;
  DeviceBuffer ones_;             // f32 [max(hidden, D)]: every norm weight (synthetic)
  DeviceBuffer zeros_;            // f32 [max(hidden, D)]: the DeltaNet a_log and dt_bias
  DeviceBuffer inv_freq_global_;  // f32 [D / 2]
  DeviceBuffer inv_freq_local_;   // f32 [D / 2] (sliding layers of Gemma: theta 1e4)
  DeviceBuffer conv_weight_;      // f32 [conv_dim, K] (DeltaNet layers share it)

  // Work buffers for max_tokens_ packed tokens.
  DeviceBuffer residual_[2];  // bf16 [T, hidden] (ping-pong across compactions)
  DeviceBuffer normed_;       // bf16 [T, hidden]
  DeviceBuffer layer_out_;    // bf16 [T, hidden]
  DeviceBuffer qkv_;          // bf16 [T, (Hq + 2 Hkv) D]
  DeviceBuffer attn_[2];      // bf16 [T, Hq D]
  DeviceBuffer gate_up_;      // bf16 [T, 2F]; the activation overwrites the gate half (DeltaNet:
                              // the delta rule's output [T, vd])
  DeviceBuffer conv_out_;     // bf16 [T, conv_dim] (DeltaNet q | k | v after conv + SiLU)
  DeviceBuffer gates_;        // f32 [2][T, Hv]: DeltaNet g, then beta
  DeviceBuffer conv_state_;   // f32 [max_batch][K - 1][conv_dim]
  DeviceBuffer delta_state_;  // f32 [max_batch][Hv][dk][dv]
  DeviceBuffer moe_scratch_;
  size_t moe_scratch_bytes_ = 0;
  DeviceBuffer ids_;          // i32 [T]
  DeviceBuffer pos_[2];       // i32 [T]
  // Segment layouts: after drop d the packed rows are re-laid out (layout d + 1). Request r owns
  // rows [cu[r], cu[r + 1]) (its capacity); its true length is counts_ (device only after a
  // fixed-ratio drop: the rest of its rows are padding, cuda_uniprefill.h "bounded segments").
  DeviceBuffer layouts_;      // i32 [drops + 1][B + 1]
  DeviceBuffer counts_[2];    // i32 [B] (ping-pong: a drop reads one and writes the other)
  DeviceBuffer kept_hist_;    // i32 [drops][B]: the counts after each drop (read after the sync)
  DeviceBuffer importance_;   // f32 [T]
  DeviceBuffer kept_rows_;    // i32 [T] (request r's local kept indices at its old offset)
  DeviceBuffer source_rows_;  // i32 [T] (the compaction's gather list, -1 on padding rows)
  DeviceBuffer obs_rows_;     // i32 [B * n]: the observation rows of every request
  DeviceBuffer obs_q_;        // bf16 [B * n, Hq D]: their queries, gathered
  DeviceBuffer obs_pos_;      // i32 [B * n]: their positions
  DeviceBuffer last_rows_;    // i32 [B]
  DeviceBuffer last_hidden_;  // bf16 [B, hidden]
  DeviceBuffer logits_;       // bf16 [B, V]
  DeviceBuffer logits_f32_;   // f32 [B, V]
  DeviceBuffer select_scratch_;
  size_t select_scratch_bytes_ = 0;
  // Host pinned staging, regions of max_batch_ + 1 (so an in-flight copy from one is never
  // overwritten by the next): kept counts (top-p sync), then one per segment layout.
  int32_t* pinned_ = nullptr;
  int max_drops() const { return shape_.n_layers; }  // a run may choose its own drop layers
  int32_t* pinned_counts() { return pinned_; }
  int32_t* pinned_layout(int segment) { return pinned_ + (1 + segment) * (max_batch_ + 1); }
};

// Widths of the fused projections and the DeltaNet pieces of a shape.
struct Widths {
  int64_t q = 0, gate = 0, kv = 0, qkv = 0;      // attention: q_w, gate_w, kv_w, fused row
  int64_t kd = 0, vd = 0, conv = 0, gdn_in = 0;  // DeltaNet: key dim, value dim, conv dim, row
  int64_t mixer_out = 0;                         // widest o-projection input (attn_ buffers)
};
Widths WidthsOf(const SyntheticShape& s) {
  Widths w;
  w.q = static_cast<int64_t>(s.n_heads) * s.head_dim;
  w.gate = s.attn_output_gate ? w.q : 0;
  w.kv = static_cast<int64_t>(s.n_kv_heads) * s.head_dim;
  w.qkv = w.q + w.gate + 2 * w.kv;
  if (s.linear_attention) {
    w.kd = static_cast<int64_t>(s.lin_k_heads) * s.lin_head_dim;
    w.vd = static_cast<int64_t>(s.lin_v_heads) * s.lin_head_dim;
    w.conv = 2 * w.kd + w.vd;
    w.gdn_in = 2 * w.kd + 2 * w.vd + 2 * s.lin_v_heads;
  }
  w.mixer_out = std::max(w.q, w.vd);
  return w;
}

ops::cuda::MoeDeviceWeights MoeViews(const SyntheticShape& s, const LayerWeights& w) {
  const int64_t e = s.n_experts, h = s.hidden, i = s.moe_intermediate,
                is = s.shared_intermediate;
  auto v = [](const DeviceBuffer& b, std::initializer_list<int64_t> shape) {
    return TensorView::Contiguous(b.data(), DType::kBF16, shape, Device::kCuda);
  };
  ops::cuda::MoeDeviceWeights m;
  m.router = v(w.router, {e, h});
  m.expert_gate_up = v(w.experts_gate_up, {e, 2 * i, h});
  m.expert_down = v(w.experts_down, {e, h, i});
  m.shared_gate_up = v(w.shared_gate_up, {2 * is, h});
  m.shared_down = v(w.shared_down, {h, is});
  m.shared_gate = v(w.shared_gate, {1, h});
  m.top_k = s.top_k;
  m.norm_topk_prob = true;
  return m;
}

Status SyntheticTransformerImpl::Init(uint64_t seed) {
  const SyntheticShape& s = shape_;
  const Widths wd = WidthsOf(s);
  const int64_t t = max_tokens_;
  // Weights ~ uniform with std 0.02 (as the anchor's randn * 0.02).
  const float scale = 0.02f * std::sqrt(3.0f);
  uint64_t stream = seed * 1000003ULL;
  UP_ASSIGN_OR_RETURN(embedding_, RandomWeight(static_cast<int64_t>(s.vocab) * s.hidden, ++stream,
                                               scale));
  const bool moe = s.n_experts > 0;
  for (int l = 0; l < s.n_layers; ++l) {
    LayerWeights w;
    if (s.IsLinearAttention(l)) {
      UP_ASSIGN_OR_RETURN(w.qkv, RandomWeight(wd.gdn_in * s.hidden, ++stream, scale));
      UP_ASSIGN_OR_RETURN(w.o, RandomWeight(wd.vd * s.hidden, ++stream, scale));
    } else {
      UP_ASSIGN_OR_RETURN(w.qkv, RandomWeight(wd.qkv * s.hidden, ++stream, scale));
      UP_ASSIGN_OR_RETURN(w.o, RandomWeight(wd.q * s.hidden, ++stream, scale));
    }
    if (moe) {
      const int64_t e = s.n_experts, h = s.hidden, i = s.moe_intermediate,
                    is = s.shared_intermediate;
      UP_ASSIGN_OR_RETURN(w.router, RandomWeight(e * h, ++stream, scale));
      UP_ASSIGN_OR_RETURN(w.experts_gate_up, RandomWeight(e * 2 * i * h, ++stream, scale));
      UP_ASSIGN_OR_RETURN(w.experts_down, RandomWeight(e * h * i, ++stream, scale));
      UP_ASSIGN_OR_RETURN(w.shared_gate_up, RandomWeight(2 * is * h, ++stream, scale));
      UP_ASSIGN_OR_RETURN(w.shared_down, RandomWeight(h * is, ++stream, scale));
      UP_ASSIGN_OR_RETURN(w.shared_gate, RandomWeight(h, ++stream, scale));
    } else {
      UP_ASSIGN_OR_RETURN(w.gate_up,
                          RandomWeight(2LL * s.intermediate * s.hidden, ++stream, scale));
      UP_ASSIGN_OR_RETURN(w.down, RandomWeight(static_cast<int64_t>(s.intermediate) * s.hidden,
                                               ++stream, scale));
    }
    layers_.push_back(std::move(w));
  }
  ones_ = DeviceBuffer::FromHost(
      std::vector<float>(std::max({s.hidden, s.head_dim, s.lin_head_dim}), 1.0f));
  zeros_ = DeviceBuffer::FromHost(
      std::vector<float>(std::max({s.hidden, s.head_dim, s.lin_head_dim, s.lin_v_heads}), 0.0f));
  inv_freq_global_ = DeviceBuffer::FromHost(ops::RopeInvFreq(s.rope_theta, s.RotaryDims()));
  inv_freq_local_ = DeviceBuffer::FromHost(ops::RopeInvFreq(
      s.rope_theta_local > 0 ? s.rope_theta_local : s.rope_theta, s.RotaryDims()));

  auto alloc = [](DeviceBuffer& b, int64_t bytes) -> Status {
    UP_ASSIGN_OR_RETURN(b,
                        DeviceBuffer::Allocate(static_cast<size_t>(std::max<int64_t>(bytes, 4))));
    return OkStatus();
  };
  if (s.linear_attention) {
    // Conv taps ~ uniform in +-1/2 (a mix of the last 4 inputs), f32.
    std::vector<float> taps(wd.conv * s.conv_kernel);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    for (float& v : taps) v = u(rng);
    conv_weight_ = DeviceBuffer::FromHost(taps);
    UP_RETURN_IF_ERROR(alloc(conv_out_, t * wd.conv * 2));
    UP_RETURN_IF_ERROR(alloc(gates_, 2 * t * s.lin_v_heads * 4));
    UP_RETURN_IF_ERROR(
        alloc(conv_state_, static_cast<int64_t>(max_batch_) * (s.conv_kernel - 1) * wd.conv * 4));
    UP_RETURN_IF_ERROR(alloc(delta_state_, static_cast<int64_t>(max_batch_) * s.lin_v_heads *
                                               s.lin_head_dim * s.lin_head_dim * 4));
  }
  if (moe) {
    moe_scratch_bytes_ = ops::cuda::MoeScratchBytes(t, MoeViews(s, layers_[0]));
    UP_RETURN_IF_ERROR(alloc(moe_scratch_, static_cast<int64_t>(moe_scratch_bytes_)));
  }
  for (int i = 0; i < 2; ++i) {
    UP_RETURN_IF_ERROR(alloc(residual_[i], t * s.hidden * 2));
    UP_RETURN_IF_ERROR(alloc(attn_[i], t * wd.mixer_out * 2));
    UP_RETURN_IF_ERROR(alloc(pos_[i], t * 4));
  }
  UP_RETURN_IF_ERROR(alloc(normed_, t * s.hidden * 2));
  UP_RETURN_IF_ERROR(alloc(layer_out_, t * s.hidden * 2));
  UP_RETURN_IF_ERROR(alloc(qkv_, t * std::max(wd.qkv, wd.gdn_in) * 2));
  UP_RETURN_IF_ERROR(
      alloc(gate_up_, t * std::max<int64_t>(moe ? 0 : 2LL * s.intermediate, wd.vd) * 2));
  UP_RETURN_IF_ERROR(alloc(ids_, t * 4));
  UP_RETURN_IF_ERROR(alloc(importance_, t * 4));
  UP_RETURN_IF_ERROR(alloc(kept_rows_, t * 4));
  UP_RETURN_IF_ERROR(alloc(layouts_, (max_drops() + 1) * (max_batch_ + 1) * 4));
  for (DeviceBuffer& c : counts_) UP_RETURN_IF_ERROR(alloc(c, max_batch_ * 4));
  UP_RETURN_IF_ERROR(alloc(kept_hist_, std::max(1, max_drops()) * max_batch_ * 4));
  UP_RETURN_IF_ERROR(alloc(source_rows_, t * 4));
  UP_RETURN_IF_ERROR(alloc(last_rows_, max_batch_ * 4));
  UP_RETURN_IF_ERROR(alloc(last_hidden_, static_cast<int64_t>(max_batch_) * s.hidden * 2));
  sparsity::SelectionParams worst;
  worst.block_size = 16;  // the smallest block size the bench allows: the most blocks
  select_scratch_bytes_ = ops::cuda::SelectTokensScratchBytes(t, worst);
  UP_RETURN_IF_ERROR(alloc(select_scratch_, static_cast<int64_t>(select_scratch_bytes_)));
  UP_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&pinned_),
                               (max_drops() + 2) * (max_batch_ + 1) * sizeof(int32_t)));
  ctx_.cuda().Synchronize();
  return OkStatus();
}

Result<PrefillTiming> SyntheticTransformerImpl::Prefill(const std::vector<int64_t>& lengths,
                                                        const UniPrefillRun& up, uint64_t seed,
                                                        bool time_attention,
                                                        std::vector<float>* logits_out) {
  const SyntheticShape& s = shape_;
  const int batch = static_cast<int>(lengths.size());
  if (batch < 1 || batch > max_batch_) {
    return InvalidArgument("batch must be 1.." + std::to_string(max_batch_));
  }
  int64_t total = 0;
  for (int64_t n : lengths) {
    if (n < 1) return InvalidArgument("every prompt length must be >= 1");
    total += n;
  }
  if (total > max_tokens_) {
    return InvalidArgument("batch of " + std::to_string(total) + " tokens exceeds the " +
                           std::to_string(max_tokens_) + " this model was sized for");
  }
  if (up.enabled && up.selection.block_size < 16) {
    return InvalidArgument("UniPrefill block size must be >= 16 here");
  }
  const std::vector<int>& drop_layers = up.drop_layers.empty() ? s.drop_layers : up.drop_layers;
  for (size_t i = 0; i < drop_layers.size(); ++i) {
    const int l = drop_layers[i];
    if (l < 0 || l >= s.n_layers || s.IsLinearAttention(l) || (i > 0 && l <= drop_layers[i - 1])) {
      return InvalidArgument("UniPrefill drop layers must be ascending attention layers of the "
                             "model (bad: " + std::to_string(l) + ")");
    }
  }
  cudaStream_t stream = ctx_.cuda().stream();
  const Widths wd = WidthsOf(s);
  const int64_t qkv_w = wd.qkv, attn_w = wd.q, q_w = wd.q, kv_w = wd.kv;
  const float attn_scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));

  // Host-side batch description: token ids, positions, the first segment layout. cap[r] is the
  // number of rows request r owns (its capacity); its true length is counts_[cur] on the device.
  std::vector<int32_t> ids(total), pos(total), cu(batch + 1, 0), len32(batch);
  std::vector<int64_t> cap(lengths);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int32_t> token(0, s.vocab - 1);
  for (int r = 0; r < batch; ++r) {
    cu[r + 1] = cu[r] + static_cast<int32_t>(cap[r]);
    len32[r] = static_cast<int32_t>(cap[r]);
    for (int64_t i = 0; i < cap[r]; ++i) {
      ids[cu[r] + i] = token(rng);
      pos[cu[r] + i] = static_cast<int32_t>(i);
    }
  }
  const sparsity::SelectionParams& sel = up.selection;
  const int n_obs = sel.last_n;
  if (up.enabled) {  // observation buffers for this batch and window
    const int64_t rows = static_cast<int64_t>(batch) * n_obs;
    if (obs_rows_.size() < static_cast<size_t>(rows) * 4) {
      UP_ASSIGN_OR_RETURN(obs_rows_, DeviceBuffer::Allocate(rows * 4));
      UP_ASSIGN_OR_RETURN(obs_pos_, DeviceBuffer::Allocate(rows * 4));
      UP_ASSIGN_OR_RETURN(obs_q_, DeviceBuffer::Allocate(rows * q_w * 2));
    }
  }
  ids_.CopyFromHost(ids.data(), ids.size() * 4);
  int cur = 0;  // which residual_/attn_/pos_/counts_ buffer is live
  pos_[cur].CopyFromHost(pos.data(), pos.size() * 4);
  counts_[cur].CopyFromHost(len32.data(), len32.size() * 4);
  layouts_.CopyFromHost(cu.data(), cu.size() * 4);
  // The copies above run on the legacy stream, and a pageable upload may return before its DMA
  // lands: finish them before the context's (non-blocking) stream reads the buffers.
  UP_CUDA_CHECK(cudaDeviceSynchronize());
  int segment = 0;  // layout of the live rows: layouts_ + segment * (batch + 1)
  auto layout = [&](int seg) { return layouts_.as<int32_t>() + seg * (batch + 1); };

  PrefillTiming timing;
  timing.kept.assign(batch, {});
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> up_events, attn_events, gdn_events, moe_events;
  auto make_pair = [] {
    std::pair<cudaEvent_t, cudaEvent_t> p;
    UP_CUDA_CHECK(cudaEventCreate(&p.first));
    UP_CUDA_CHECK(cudaEventCreate(&p.second));
    return p;
  };
  auto start_end = make_pair();
  UP_CUDA_CHECK(cudaEventRecord(start_end.first, stream));

  int64_t t = total;
  int max_len = static_cast<int>(*std::max_element(cap.begin(), cap.end()));
  const float embed_scale = s.gelu ? std::sqrt(static_cast<float>(s.hidden)) : 1.0f;
  ops::cuda::Embedding(ctx_, residual_[cur].View(DType::kBF16, {t, s.hidden}),
                       embedding_.View(DType::kBF16, {s.vocab, s.hidden}), ids_.as<int32_t>(),
                       embed_scale);
  const float* ones = ones_.as<float>();
  const float eps = 1e-6f;

  for (int l = 0; l < s.n_layers; ++l) {
    const LayerWeights& w = layers_[l];
    TensorView res = residual_[cur].View(DType::kBF16, {t, s.hidden});
    TensorView normed = normed_.View(DType::kBF16, {t, s.hidden});
    TensorView out = layer_out_.View(DType::kBF16, {t, s.hidden});
    if (l == 0) {
      ops::cuda::RmsNorm(ctx_, normed, res, ones, eps);
    } else {
      ops::cuda::AddRmsNorm(ctx_, normed, res, out, ones, eps);
    }
    int64_t mixer_w = attn_w;  // the o-projection's input width
    if (s.IsLinearAttention(l)) {
      // Gated DeltaNet over the alive tokens of each request, states from zero.
      const int64_t gw = wd.gdn_in, nv = s.lin_v_heads, dk = s.lin_head_dim;
      ops::cuda::Gemm(ctx_, qkv_.View(DType::kBF16, {t, gw}), normed,
                      w.qkv.View(DType::kBF16, {gw, s.hidden}));
      UP_CUDA_CHECK(cudaMemsetAsync(conv_state_.data(), 0,
                                    static_cast<size_t>(batch) * (s.conv_kernel - 1) * wd.conv * 4,
                                    stream));
      UP_CUDA_CHECK(cudaMemsetAsync(delta_state_.data(), 0,
                                    static_cast<size_t>(batch) * nv * dk * dk * 4, stream));
      if (time_attention) {
        gdn_events.push_back(make_pair());
        UP_CUDA_CHECK(cudaEventRecord(gdn_events.back().first, stream));
      }
      ops::cuda::LinearAttentionBatch seqs;
      seqs.cu_seqlens = layout(segment);  // padding rows run after a request's real ones
      seqs.batch = batch;
      seqs.max_seqlen = max_len;
      TensorView conv_out = conv_out_.View(DType::kBF16, {t, wd.conv});
      ops::cuda::CausalConv1dSilu(
          ctx_, conv_out, Rows(Bf16(qkv_, 0), DType::kBF16, t, wd.conv, gw),
          conv_weight_.View(DType::kF32, {wd.conv, s.conv_kernel}), conv_state_.as<float>(), seqs);
      TensorView q = Heads(Bf16(conv_out_, 0), t, s.lin_k_heads, dk, wd.conv);
      TensorView k = Heads(Bf16(conv_out_, wd.kd), t, s.lin_k_heads, dk, wd.conv);
      TensorView v = Heads(Bf16(conv_out_, 2 * wd.kd), t, nv, dk, wd.conv);
      ops::cuda::L2NormalizeHeads(ctx_, q, 1e-6f, 1.0f / std::sqrt(static_cast<float>(dk)));
      ops::cuda::L2NormalizeHeads(ctx_, k, 1e-6f);
      float* g = gates_.as<float>();
      float* beta = g + t * nv;
      // a_log = dt_bias = 0 for every head (zeros_).
      cuda_backend::DeltaNetGates(
          ctx_, g, beta, Rows(Bf16(qkv_, 2 * wd.kd + 2 * wd.vd), DType::kBF16, t, nv, gw),
          Rows(Bf16(qkv_, 2 * wd.kd + 2 * wd.vd + nv), DType::kBF16, t, nv, gw),
          zeros_.as<float>(), zeros_.as<float>());
      TensorView core = gate_up_.View(DType::kBF16, {t, nv, dk});
      ops::cuda::GatedDeltaRule(
          ctx_, core, q, k, v, TensorView::Contiguous(g, DType::kF32, {t, nv}, Device::kCuda),
          TensorView::Contiguous(beta, DType::kF32, {t, nv}, Device::kCuda),
          delta_state_.as<float>(), seqs);
      // Per-head RMSNorm, times SiLU(z), into attn_[cur] for the out-projection.
      TensorView heads = gate_up_.View(DType::kBF16, {t * nv, dk});
      ops::cuda::RmsNorm(ctx_, heads, heads, ones, eps);
      ops::cuda::GatedActivation(
          ctx_, attn_[cur].View(DType::kBF16, {t, wd.vd}),
          Rows(Bf16(qkv_, 2 * wd.kd + wd.vd), DType::kBF16, t, wd.vd, gw),
          gate_up_.View(DType::kBF16, {t, wd.vd}), ops::Activation::kSilu);
      if (time_attention) UP_CUDA_CHECK(cudaEventRecord(gdn_events.back().second, stream));
      mixer_w = wd.vd;
    } else {
      TensorView qkv = qkv_.View(DType::kBF16, {t, qkv_w});
      ops::cuda::Gemm(ctx_, qkv, normed, w.qkv.View(DType::kBF16, {qkv_w, s.hidden}));
      uint16_t* q_ptr = Bf16(qkv_, 0);
      uint16_t* gate_ptr = Bf16(qkv_, q_w);
      uint16_t* k_ptr = Bf16(qkv_, q_w + wd.gate);
      uint16_t* v_ptr = Bf16(qkv_, q_w + wd.gate + kv_w);
      if (s.qk_norm) {  // per-head RMSNorm: one strided [T, D] view per head
        for (int h = 0; h < s.n_heads + s.n_kv_heads; ++h) {
          uint16_t* head_ptr =
              h < s.n_heads ? q_ptr + static_cast<int64_t>(h) * s.head_dim
                            : k_ptr + static_cast<int64_t>(h - s.n_heads) * s.head_dim;
          TensorView head = Rows(head_ptr, DType::kBF16, t, s.head_dim, qkv_w);
          ops::cuda::RmsNorm(ctx_, head, head, ones, eps);
        }
      }
      const bool full = s.IsFullAttention(l);
      const float* inv_freq = (full || s.rope_theta_local == 0) ? inv_freq_global_.as<float>()
                                                                : inv_freq_local_.as<float>();
      const int32_t* positions = pos_[cur].as<int32_t>();
      TensorView q = Heads(q_ptr, t, s.n_heads, s.head_dim, qkv_w);
      TensorView k = Heads(k_ptr, t, s.n_kv_heads, s.head_dim, qkv_w);
      TensorView v = Heads(v_ptr, t, s.n_kv_heads, s.head_dim, qkv_w);
      ops::cuda::Rope(ctx_, q, positions, inv_freq, s.RotaryDims(), ops::RopeStyle::kNeox);
      ops::cuda::Rope(ctx_, k, positions, inv_freq, s.RotaryDims(), ops::RopeStyle::kNeox);
      TensorView attn = attn_[cur].View(DType::kBF16, {t, s.n_heads, s.head_dim});
      ops::cuda::VarlenBatch vb;
      vb.cu_seqlens_q = vb.cu_seqlens_k = layout(segment);  // padding keys sit at
                                                           // kPaddingPosition: never visible
      vb.batch = batch;
      vb.max_seqlen_q = vb.max_seqlen_k = max_len;
      ops::AttentionParams ap;
      ap.scale = attn_scale;
      ap.window = full ? 0 : s.sliding_window;
      if (time_attention) {
        attn_events.push_back(make_pair());
        UP_CUDA_CHECK(cudaEventRecord(attn_events.back().first, stream));
      }
      ops::cuda::FlashAttention(ctx_, attn, q, k, v, positions, positions, vb, ap);
      if (time_attention) UP_CUDA_CHECK(cudaEventRecord(attn_events.back().second, stream));
      if (s.attn_output_gate) {  // out *= sigmoid(gate), before any compaction
        TensorView gate =
            TensorView::Contiguous(gate_ptr, DType::kBF16, {t, 1, q_w}, Device::kCuda);
        gate.stride[0] = qkv_w;
        cuda_backend::SigmoidGateMul(ctx_, attn_[cur].View(DType::kBF16, {t, 1, attn_w}), gate);
      }

      const bool drop = up.enabled && std::find(drop_layers.begin(), drop_layers.end(), l) !=
                                          drop_layers.end();
      if (drop) {
        up_events.push_back(make_pair());
        UP_CUDA_CHECK(cudaEventRecord(up_events.back().first, stream));
        const int nxt = 1 - cur;
        const int32_t* counts = counts_[cur].as<int32_t>();
        int32_t* new_counts = counts_[nxt].as<int32_t>();
        UP_CUDA_CHECK(cudaMemsetAsync(importance_.data(), 0, t * 4, stream));
        // The observation queries: each request's last n real rows (device-side lengths).
        ops::cuda::SegmentTailRows(ctx_, obs_rows_.as<int32_t>(), layout(segment), counts, batch,
                                   n_obs);
        const int64_t n_obs_rows = static_cast<int64_t>(batch) * n_obs;
        ops::cuda::GatherRows(ctx_, Rows(Bf16(obs_q_, 0), DType::kBF16, n_obs_rows, q_w, q_w),
                              Rows(q_ptr, DType::kBF16, t, q_w, qkv_w), obs_rows_.as<int32_t>());
        ops::cuda::GatherRows(ctx_, Rows(obs_pos_.as<int32_t>(), DType::kI32, n_obs_rows, 1, 1),
                              Rows(pos_[cur].as<int32_t>(), DType::kI32, t, 1, 1),
                              obs_rows_.as<int32_t>());
        for (int r = 0; r < batch; ++r) {
          const int64_t off = cu[r];
          // Requests that can hold more than S + n tokens are scored; the device decides whether
          // the true length does (else SelectTokens keeps everything).
          if (cap[r] > static_cast<int64_t>(sel.sink) + n_obs) {
            TensorView q_obs = Heads(Bf16(obs_q_, static_cast<int64_t>(r) * n_obs * q_w), n_obs,
                                     s.n_heads, s.head_dim, q_w);
            TensorView k_all = Heads(k_ptr + off * qkv_w, cap[r], s.n_kv_heads, s.head_dim, qkv_w);
            ops::cuda::AttentionImportance(ctx_, importance_.as<float>() + off, q_obs, k_all,
                                           obs_pos_.as<int32_t>() + r * n_obs, positions + off,
                                           attn_scale);
          }
          ops::cuda::SelectTokens(ctx_, kept_rows_.as<int32_t>() + off, new_counts + r,
                                  importance_.as<float>() + off, cap[r], sel,
                                  select_scratch_.data(), select_scratch_bytes_, counts + r);
        }
        UP_CUDA_CHECK(cudaMemcpyAsync(kept_hist_.as<int32_t>() + segment * batch, new_counts,
                                      batch * 4, cudaMemcpyDeviceToDevice, stream));
        // The next capacities. Fixed ratio: a bound known from the capacities alone, so no host
        // sync; top-p: the kept counts themselves, learned by the one host sync of this drop.
        if (sel.mode == sparsity::SelectionMode::kFixedRatio && !up.sync_each_drop) {
          for (int r = 0; r < batch; ++r) cap[r] = ops::cuda::FixedRatioCapacity(cap[r], sel);
        } else {
          UP_CUDA_CHECK(cudaMemcpyAsync(pinned_counts(), new_counts, batch * 4,
                                        cudaMemcpyDeviceToHost, stream));
          UP_CUDA_CHECK(cudaStreamSynchronize(stream));
          for (int r = 0; r < batch; ++r) cap[r] = pinned_counts()[r];
        }
        std::vector<int32_t> new_cu(batch + 1, 0);
        for (int r = 0; r < batch; ++r) new_cu[r + 1] = new_cu[r] + static_cast<int32_t>(cap[r]);
        // Each segment has its own pinned region: the copy may still be in flight at the next drop.
        std::copy(new_cu.begin(), new_cu.end(), pinned_layout(segment + 1));
        UP_CUDA_CHECK(cudaMemcpyAsync(layout(segment + 1), pinned_layout(segment + 1),
                                      (batch + 1) * 4, cudaMemcpyHostToDevice, stream));
        const int64_t t_new = new_cu[batch];
        // Compaction: kept rows first in each request's new segment, then zero padding rows.
        ops::cuda::CompactSegments(ctx_, source_rows_.as<int32_t>(), pos_[nxt].as<int32_t>(),
                                   kept_rows_.as<int32_t>(), new_counts, layout(segment),
                                   layout(segment + 1), pos_[cur].as<int32_t>(), batch, t_new);
        ops::cuda::GatherRows(ctx_, attn_[nxt].View(DType::kBF16, {t_new, attn_w}),
                              attn_[cur].View(DType::kBF16, {t, attn_w}),
                              source_rows_.as<int32_t>());
        ops::cuda::GatherRows(ctx_, residual_[nxt].View(DType::kBF16, {t_new, s.hidden}),
                              residual_[cur].View(DType::kBF16, {t, s.hidden}),
                              source_rows_.as<int32_t>());
        cu = new_cu;
        cur = nxt;
        ++segment;
        t = t_new;
        max_len = static_cast<int>(*std::max_element(cap.begin(), cap.end()));
        UP_CUDA_CHECK(cudaEventRecord(up_events.back().second, stream));
        res = residual_[cur].View(DType::kBF16, {t, s.hidden});
        normed = normed_.View(DType::kBF16, {t, s.hidden});
        out = layer_out_.View(DType::kBF16, {t, s.hidden});
      }
    }  // attention
    ops::cuda::Gemm(ctx_, out, attn_[cur].View(DType::kBF16, {t, mixer_w}),
                    w.o.View(DType::kBF16, {s.hidden, mixer_w}));
    ops::cuda::AddRmsNorm(ctx_, normed, res, out, ones, eps);
    if (s.n_experts > 0) {
      if (time_attention) {
        moe_events.push_back(make_pair());
        UP_CUDA_CHECK(cudaEventRecord(moe_events.back().first, stream));
      }
      ops::cuda::MoeForward(ctx_, out, normed, MoeViews(s, w), moe_scratch_.data(),
                            moe_scratch_bytes_);
      if (time_attention) UP_CUDA_CHECK(cudaEventRecord(moe_events.back().second, stream));
      continue;
    }
    const int64_t f = s.intermediate;
    TensorView gate_up = gate_up_.View(DType::kBF16, {t, 2 * f});
    ops::cuda::Gemm(ctx_, gate_up, normed, w.gate_up.View(DType::kBF16, {2 * f, s.hidden}));
    TensorView gate = Rows(Bf16(gate_up_, 0), DType::kBF16, t, f, 2 * f);
    TensorView upv = Rows(Bf16(gate_up_, f), DType::kBF16, t, f, 2 * f);
    ops::cuda::GatedActivation(ctx_, gate, gate, upv,
                               s.gelu ? ops::Activation::kGeluTanh : ops::Activation::kSilu);
    ops::cuda::Gemm(ctx_, out, gate, w.down.View(DType::kBF16, {s.hidden, f}));
  }
  // Final residual add + norm, then each request's last row -> logits.
  TensorView res = residual_[cur].View(DType::kBF16, {t, s.hidden});
  TensorView normed = normed_.View(DType::kBF16, {t, s.hidden});
  ops::cuda::AddRmsNorm(ctx_, normed, res, layer_out_.View(DType::kBF16, {t, s.hidden}), ones, eps);
  ops::cuda::SegmentTailRows(ctx_, last_rows_.as<int32_t>(), layout(segment),
                             counts_[cur].as<int32_t>(), batch, 1);
  TensorView last = last_hidden_.View(DType::kBF16, {batch, s.hidden});
  ops::cuda::GatherRows(ctx_, last, normed, last_rows_.as<int32_t>());
  if (logits_.size() < static_cast<size_t>(batch) * s.vocab * 2) {
    logits_ = DeviceBuffer(static_cast<size_t>(batch) * s.vocab * 2);
    logits_f32_ = DeviceBuffer(static_cast<size_t>(batch) * s.vocab * 4);
  }
  ops::cuda::Gemm(ctx_, logits_.View(DType::kBF16, {batch, s.vocab}), last,
                  embedding_.View(DType::kBF16, {s.vocab, s.hidden}));
  ops::cuda::Bf16ToF32(ctx_, logits_f32_.as<float>(), logits_.data(),
                       static_cast<int64_t>(batch) * s.vocab);
  UP_CUDA_CHECK(cudaEventRecord(start_end.second, stream));
  UP_CUDA_CHECK(cudaStreamSynchronize(stream));

  auto elapsed = [](const std::pair<cudaEvent_t, cudaEvent_t>& p) {
    float ms = 0;
    UP_CUDA_CHECK(cudaEventElapsedTime(&ms, p.first, p.second));
    UP_CUDA_CHECK(cudaEventDestroy(p.first));
    UP_CUDA_CHECK(cudaEventDestroy(p.second));
    return static_cast<double>(ms);
  };
  timing.total_ms = elapsed(start_end);
  for (auto& p : up_events) timing.uniprefill_ms += elapsed(p);
  for (auto& p : attn_events) timing.attention_ms += elapsed(p);
  for (auto& p : gdn_events) timing.linear_attention_ms += elapsed(p);
  for (auto& p : moe_events) timing.moe_ms += elapsed(p);
  if (logits_out) {
    *logits_out = logits_f32_.ToHost<float>(static_cast<size_t>(batch) * s.vocab);
  }
  if (segment > 0) {  // the kept counts of every drop, read after the forward's one sync
    const std::vector<int32_t> hist =
        kept_hist_.ToHost<int32_t>(static_cast<size_t>(segment) * batch);
    for (int d = 0; d < segment; ++d) {
      for (int r = 0; r < batch; ++r) timing.kept[r].push_back(hist[d * batch + r]);
    }
  }
  return timing;
}

}  // namespace

Result<std::unique_ptr<SyntheticTransformer>> SyntheticTransformer::Create(
    DeviceContext& ctx, const SyntheticShape& shape, int64_t max_tokens, uint64_t seed) {
  if (ctx.device() != Device::kCuda) {
    return InvalidArgument("SyntheticTransformer needs a CUDA context (--device cuda)");
  }
  auto model = std::make_unique<SyntheticTransformerImpl>(ctx, shape, max_tokens);
  UP_RETURN_IF_ERROR(model->Init(seed));
  return std::unique_ptr<SyntheticTransformer>(std::move(model));
}

}  // namespace uniprefill
