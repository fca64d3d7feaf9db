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
#include "ops/cuda/cuda_dense_ops.h"
#include "ops/cuda/cuda_uniprefill.h"

namespace uniprefill {

int64_t SyntheticShape::Parameters() const {
  const int64_t qkv = static_cast<int64_t>(n_heads + 2 * n_kv_heads) * head_dim * hidden;
  const int64_t o = static_cast<int64_t>(n_heads) * head_dim * hidden;
  const int64_t ffn = 3LL * hidden * intermediate;
  return n_layers * (qkv + o + ffn) + static_cast<int64_t>(vocab) * hidden;
}

double SyntheticShape::LinearPrefillFlops(int64_t n) const {
  const double per_token_linear =
      2.0 * (static_cast<double>(hidden) * (n_heads + 2 * n_kv_heads) * head_dim +
             static_cast<double>(n_heads) * head_dim * hidden + 3.0 * hidden * intermediate);
  return per_token_linear * n * n_layers;
}

double SyntheticShape::DensePrefillFlops(int64_t n) const {
  // Same convention as shared/bench/pytorch_anchor.py: linear layers + causal attention (QK^T and
  // PV, 4 * H * D per visible pair); embedding, norms and the last token's logits are not counted.
  double flops = LinearPrefillFlops(n);
  const double nn = static_cast<double>(n);
  for (int l = 0; l < n_layers; ++l) {
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
  } else if (name == "tiny") {
    s.n_layers = 4, s.hidden = 256, s.n_heads = 4, s.n_kv_heads = 2, s.head_dim = 64;
    s.intermediate = 512, s.vocab = 1000, s.rope_theta = 10000.0f;
    s.drop_layers = {1};
  } else {
    return InvalidArgument("unknown synthetic shape '" + name +
                           "' (known: llama-3.1-8b, gemma-3-12b, tiny)");
  }
  return s;
}

namespace {

TensorView Rows(void* data, DType dtype, int64_t rows, int64_t cols, int64_t row_stride) {
  TensorView v = TensorView::Contiguous(data, dtype, {rows, cols}, Device::kCuda);
  v.stride[0] = row_stride;
  return v;
}

// A [rows, heads, head_dim] view whose rows are row_stride elements apart.
TensorView Heads(void* data, int64_t rows, int64_t heads, int64_t head_dim, int64_t row_stride) {
  TensorView v = TensorView::Contiguous(data, DType::kBF16, {rows, heads, head_dim}, Device::kCuda);
  v.stride[0] = row_stride;
  return v;
}

uint16_t* Bf16At(const DeviceBuffer& b, int64_t element_offset) {
  return b.as<uint16_t>() + element_offset;
}

struct LayerWeights {
  DeviceBuffer qkv;      // bf16 [(Hq + 2 Hkv) D, hidden]
  DeviceBuffer o;        // bf16 [hidden, Hq D]
  DeviceBuffer gate_up;  // bf16 [2F, hidden]
  DeviceBuffer down;     // bf16 [hidden, F]
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
  DeviceBuffer inv_freq_global_;  // f32 [D / 2]
  DeviceBuffer inv_freq_local_;   // f32 [D / 2] (sliding layers of Gemma: theta 1e4)

  // Work buffers for max_tokens_ packed tokens.
  DeviceBuffer residual_[2];  // bf16 [T, hidden] (ping-pong across compactions)
  DeviceBuffer normed_;       // bf16 [T, hidden]
  DeviceBuffer layer_out_;    // bf16 [T, hidden]
  DeviceBuffer qkv_;          // bf16 [T, (Hq + 2 Hkv) D]
  DeviceBuffer attn_[2];      // bf16 [T, Hq D]
  DeviceBuffer gate_up_;      // bf16 [T, 2F]; the activation overwrites the gate half
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

Status SyntheticTransformerImpl::Init(uint64_t seed) {
  const SyntheticShape& s = shape_;
  const int64_t qkv_w = static_cast<int64_t>(s.n_heads + 2 * s.n_kv_heads) * s.head_dim;
  const int64_t attn_w = static_cast<int64_t>(s.n_heads) * s.head_dim;
  const int64_t t = max_tokens_;
  // Weights ~ uniform with std 0.02 (as the anchor's randn * 0.02).
  const float scale = 0.02f * std::sqrt(3.0f);
  uint64_t stream = seed * 1000003ULL;
  UP_ASSIGN_OR_RETURN(embedding_, RandomWeight(static_cast<int64_t>(s.vocab) * s.hidden, ++stream,
                                               scale));
  for (int l = 0; l < s.n_layers; ++l) {
    LayerWeights w;
    UP_ASSIGN_OR_RETURN(w.qkv, RandomWeight(qkv_w * s.hidden, ++stream, scale));
    UP_ASSIGN_OR_RETURN(w.o, RandomWeight(attn_w * s.hidden, ++stream, scale));
    UP_ASSIGN_OR_RETURN(w.gate_up, RandomWeight(2LL * s.intermediate * s.hidden, ++stream, scale));
    UP_ASSIGN_OR_RETURN(w.down, RandomWeight(static_cast<int64_t>(s.intermediate) * s.hidden,
                                             ++stream, scale));
    layers_.push_back(std::move(w));
  }
  ones_ = DeviceBuffer::FromHost(std::vector<float>(std::max(s.hidden, s.head_dim), 1.0f));
  inv_freq_global_ = DeviceBuffer::FromHost(ops::RopeInvFreq(s.rope_theta, s.head_dim));
  inv_freq_local_ = DeviceBuffer::FromHost(
      ops::RopeInvFreq(s.rope_theta_local > 0 ? s.rope_theta_local : s.rope_theta, s.head_dim));

  auto alloc = [](DeviceBuffer& b, int64_t bytes) -> Status {
    UP_ASSIGN_OR_RETURN(b, DeviceBuffer::Allocate(static_cast<size_t>(bytes)));
    return OkStatus();
  };
  for (int i = 0; i < 2; ++i) {
    UP_RETURN_IF_ERROR(alloc(residual_[i], t * s.hidden * 2));
    UP_RETURN_IF_ERROR(alloc(attn_[i], t * attn_w * 2));
    UP_RETURN_IF_ERROR(alloc(pos_[i], t * 4));
  }
  UP_RETURN_IF_ERROR(alloc(normed_, t * s.hidden * 2));
  UP_RETURN_IF_ERROR(alloc(layer_out_, t * s.hidden * 2));
  UP_RETURN_IF_ERROR(alloc(qkv_, t * qkv_w * 2));
  UP_RETURN_IF_ERROR(alloc(gate_up_, t * 2LL * s.intermediate * 2));
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
  const int64_t qkv_w = static_cast<int64_t>(s.n_heads + 2 * s.n_kv_heads) * s.head_dim;
  const int64_t attn_w = static_cast<int64_t>(s.n_heads) * s.head_dim;
  const int64_t q_w = attn_w, kv_w = static_cast<int64_t>(s.n_kv_heads) * s.head_dim;
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
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> up_events, attn_events;
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
    TensorView qkv = qkv_.View(DType::kBF16, {t, qkv_w});
    ops::cuda::Gemm(ctx_, qkv, normed, w.qkv.View(DType::kBF16, {qkv_w, s.hidden}));
    uint16_t* q_ptr = Bf16At(qkv_, 0);
    uint16_t* k_ptr = Bf16At(qkv_, q_w);
    uint16_t* v_ptr = Bf16At(qkv_, q_w + kv_w);
    if (s.qk_norm) {  // per-head RMSNorm: one strided [T, D] view per head
      for (int h = 0; h < s.n_heads + s.n_kv_heads; ++h) {
        TensorView head = Rows(q_ptr + static_cast<int64_t>(h) * s.head_dim, DType::kBF16, t,
                               s.head_dim, qkv_w);
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
    ops::cuda::Rope(ctx_, q, positions, inv_freq, s.head_dim, ops::RopeStyle::kNeox);
    ops::cuda::Rope(ctx_, k, positions, inv_freq, s.head_dim, ops::RopeStyle::kNeox);
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

    const bool drop = up.enabled &&
                      std::find(s.drop_layers.begin(), s.drop_layers.end(), l) != s.drop_layers.end();
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
        ops::cuda::GatherRows(ctx_, Rows(Bf16At(attn_[nxt], noff * attn_w), DType::kBF16, kept,
                                         attn_w, attn_w),
                              Rows(Bf16At(attn_[cur], off * attn_w), DType::kBF16, len[r], attn_w,
                                   attn_w),
                              rows);
        ops::cuda::GatherRows(ctx_, Rows(Bf16At(residual_[nxt], noff * s.hidden), DType::kBF16,
                                         kept, s.hidden, s.hidden),
                              Rows(Bf16At(residual_[cur], off * s.hidden), DType::kBF16, len[r],
                                   s.hidden, s.hidden),
                              rows);
        ops::cuda::GatherRows(ctx_, Rows(pos_[nxt].as<int32_t>() + noff, DType::kI32, kept, 1, 1),
                              Rows(pos_[cur].as<int32_t>() + off, DType::kI32, len[r], 1, 1), rows);
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
    ops::cuda::Gemm(ctx_, out, attn_[cur].View(DType::kBF16, {t, attn_w}),
                    w.o.View(DType::kBF16, {s.hidden, attn_w}));
    ops::cuda::AddRmsNorm(ctx_, normed, res, out, ones, eps);
    const int64_t f = s.intermediate;
    TensorView gate_up = gate_up_.View(DType::kBF16, {t, 2 * f});
    ops::cuda::Gemm(ctx_, gate_up, normed, w.gate_up.View(DType::kBF16, {2 * f, s.hidden}));
    TensorView gate = Rows(Bf16At(gate_up_, 0), DType::kBF16, t, f, 2 * f);
    TensorView upv = Rows(Bf16At(gate_up_, f), DType::kBF16, t, f, 2 * f);
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
