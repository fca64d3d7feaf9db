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
#include "model/cuda/cuda_model_kernels.h"
#include "model/cuda/device_views.h"
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

using cuda_model::Bf16;
using cuda_model::Heads;
using cuda_model::Rows;

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
  DeviceBuffer cu_seqlens_;   // i32 [B + 1]
  DeviceBuffer importance_;   // f32 [T]
  DeviceBuffer kept_rows_;    // i32 [T] (request r's local kept indices at its old offset)
  DeviceBuffer kept_count_;   // i32 [B]
  DeviceBuffer last_rows_;    // i32 [B]
  DeviceBuffer last_hidden_;  // bf16 [B, hidden]
  DeviceBuffer logits_;       // bf16 [B, V]
  DeviceBuffer logits_f32_;   // f32 [B, V]
  DeviceBuffer select_scratch_;
  size_t select_scratch_bytes_ = 0;
  // Host pinned staging, three regions of max_batch_ + 1 (so an in-flight copy from one is never
  // overwritten by the next): kept counts, cu_seqlens, last rows.
  int32_t* pinned_ = nullptr;
  int32_t* pinned_counts() { return pinned_; }
  int32_t* pinned_cu() { return pinned_ + (max_batch_ + 1); }
  int32_t* pinned_last() { return pinned_ + 2 * (max_batch_ + 1); }
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
  UP_RETURN_IF_ERROR(alloc(cu_seqlens_, (max_batch_ + 1) * 4));
  UP_RETURN_IF_ERROR(alloc(kept_count_, max_batch_ * 4));
  UP_RETURN_IF_ERROR(alloc(last_rows_, max_batch_ * 4));
  UP_RETURN_IF_ERROR(alloc(last_hidden_, static_cast<int64_t>(max_batch_) * s.hidden * 2));
  sparsity::SelectionParams worst;
  worst.block_size = 16;  // the smallest block size the bench allows: the most blocks
  select_scratch_bytes_ = ops::cuda::SelectTokensScratchBytes(t, worst);
  UP_RETURN_IF_ERROR(alloc(select_scratch_, static_cast<int64_t>(select_scratch_bytes_)));
  UP_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&pinned_),
                               3 * (max_batch_ + 1) * sizeof(int32_t)));
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
  cudaStream_t stream = ctx_.cuda().stream();
  const Widths wd = WidthsOf(s);
  const int64_t qkv_w = wd.qkv, attn_w = wd.q, q_w = wd.q, kv_w = wd.kv;
  const float attn_scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));

  // Host-side batch description: token ids, positions, cu_seqlens.
  std::vector<int32_t> ids(total), pos(total), cu(batch + 1, 0);
  std::vector<int64_t> len(lengths);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int32_t> token(0, s.vocab - 1);
  for (int r = 0; r < batch; ++r) {
    cu[r + 1] = cu[r] + static_cast<int32_t>(len[r]);
    for (int64_t i = 0; i < len[r]; ++i) {
      ids[cu[r] + i] = token(rng);
      pos[cu[r] + i] = static_cast<int32_t>(i);
    }
  }
  ids_.CopyFromHost(ids.data(), ids.size() * 4);
  int cur = 0;  // which residual_/attn_/pos_ buffer is live
  pos_[cur].CopyFromHost(pos.data(), pos.size() * 4);
  cu_seqlens_.CopyFromHost(cu.data(), cu.size() * 4);

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
  int max_len = static_cast<int>(*std::max_element(len.begin(), len.end()));
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
      seqs.cu_seqlens = cu_seqlens_.as<int32_t>();
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
      cuda_model::DeltaNetGates(
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
      vb.cu_seqlens_q = vb.cu_seqlens_k = cu_seqlens_.as<int32_t>();
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
        cuda_model::SigmoidGateMul(ctx_, attn_[cur].View(DType::kBF16, {t, 1, attn_w}), gate);
      }

      const bool drop = up.enabled && std::find(s.drop_layers.begin(), s.drop_layers.end(), l) !=
                                          s.drop_layers.end();
      if (drop) {
        up_events.push_back(make_pair());
        UP_CUDA_CHECK(cudaEventRecord(up_events.back().first, stream));
        const sparsity::SelectionParams& sel = up.selection;
        UP_CUDA_CHECK(cudaMemsetAsync(importance_.data(), 0, t * 4, stream));
        for (int r = 0; r < batch; ++r) {
          const int64_t n_r = len[r], off = cu[r];
          if (n_r > static_cast<int64_t>(sel.sink) + sel.last_n) {
            const int64_t n_obs = std::min<int64_t>(sel.last_n, n_r);
            TensorView q_obs = Heads(q_ptr + (off + n_r - n_obs) * qkv_w, n_obs, s.n_heads,
                                     s.head_dim, qkv_w);
            TensorView k_all = Heads(k_ptr + off * qkv_w, n_r, s.n_kv_heads, s.head_dim, qkv_w);
            ops::cuda::AttentionImportance(ctx_, importance_.as<float>() + off, q_obs, k_all,
                                           positions + off + n_r - n_obs, positions + off,
                                           attn_scale);
          }
          ops::cuda::SelectTokens(ctx_, kept_rows_.as<int32_t>() + off,
                                  kept_count_.as<int32_t>() + r, importance_.as<float>() + off, n_r,
                                  sel, select_scratch_.data(), select_scratch_bytes_);
        }
        // The one host sync of a drop layer: the kept counts size every later launch.
        UP_CUDA_CHECK(cudaMemcpyAsync(pinned_counts(), kept_count_.data(), batch * 4,
                                      cudaMemcpyDeviceToHost, stream));
        UP_CUDA_CHECK(cudaStreamSynchronize(stream));
        const int nxt = 1 - cur;
        std::vector<int32_t> new_cu(batch + 1, 0);
        for (int r = 0; r < batch; ++r) new_cu[r + 1] = new_cu[r] + pinned_counts()[r];
        for (int r = 0; r < batch; ++r) {
          const int64_t kept = pinned_counts()[r], off = cu[r], noff = new_cu[r];
          const int32_t* rows = kept_rows_.as<int32_t>() + off;
          ops::cuda::GatherRows(ctx_, Rows(Bf16(attn_[nxt], noff * attn_w), DType::kBF16, kept,
                                           attn_w, attn_w),
                                Rows(Bf16(attn_[cur], off * attn_w), DType::kBF16, len[r], attn_w,
                                     attn_w),
                                rows);
          ops::cuda::GatherRows(ctx_, Rows(Bf16(residual_[nxt], noff * s.hidden), DType::kBF16,
                                           kept, s.hidden, s.hidden),
                                Rows(Bf16(residual_[cur], off * s.hidden), DType::kBF16, len[r],
                                     s.hidden, s.hidden),
                                rows);
          ops::cuda::GatherRows(ctx_,
                                Rows(pos_[nxt].as<int32_t>() + noff, DType::kI32, kept, 1, 1),
                                Rows(pos_[cur].as<int32_t>() + off, DType::kI32, len[r], 1, 1),
                                rows);
          len[r] = kept;
          timing.kept[r].push_back(kept);
        }
        cu = new_cu;
        for (int r = 0; r <= batch; ++r) pinned_cu()[r] = cu[r];
        UP_CUDA_CHECK(cudaMemcpyAsync(cu_seqlens_.data(), pinned_cu(), (batch + 1) * 4,
                                      cudaMemcpyHostToDevice, stream));
        cur = nxt;
        t = cu[batch];
        max_len = static_cast<int>(*std::max_element(len.begin(), len.end()));
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
  for (int r = 0; r < batch; ++r) pinned_last()[r] = cu[r + 1] - 1;
  UP_CUDA_CHECK(cudaMemcpyAsync(last_rows_.data(), pinned_last(), batch * 4,
                                cudaMemcpyHostToDevice, stream));
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
