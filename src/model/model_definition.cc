#include "model/model_definition.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "io/dequant.h"

namespace uniprefill {
namespace {

// A hyper-parameter read from the model file must be finite and inside (lo, hi]: a NaN epsilon
// or a negative rope base does not fail loudly later, it only makes every logit NaN.
Status CheckHyper(double v, double lo, double hi, const std::string& name) {
  if (std::isfinite(v) && v > lo && v <= hi) return OkStatus();
  return InvalidArgument("the model's " + name + " is " + std::to_string(v) +
                         ", expected a finite value in (" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "]; the model file is damaged or not supported");
}

Status CheckFinite(const std::vector<float>& v, const std::string& what) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      return InvalidArgument("the model's " + what + " has a non-finite value at element " +
                             std::to_string(i) + "; the model file is damaged");
    }
  }
  return OkStatus();
}

// Rows of a CPU-resident linear weight, dequantized: every row when the part has at most
// kWholeElements values, else kSampleRows rows evenly spaced from the first to the last (a
// whole-tensor scan of a large model's edge layers would cost seconds). Random-weight (seeded)
// and device-resident parts are skipped.
constexpr int64_t kWholeElements = int64_t{1} << 20;
constexpr int64_t kSampleRows = 64;

Status CheckRows(const ops::LinearWeight& w, const std::string& what, int64_t sample_rows) {
  if (w.in_features <= 0) return OkStatus();
  std::vector<float> row(static_cast<size_t>(w.in_features));
  int64_t first_row = 0;  // of this part in the stacked weight
  for (const TensorView& t : w.parts) {
    const int64_t rows = t.numel() / w.in_features;
    if (t.device == Device::kCpu && t.data && CanDequantize(t.dtype) && rows > 0) {
      const int64_t row_bytes = DTypeBytes(t.dtype, w.in_features);
      const bool whole = rows * w.in_features <= kWholeElements || rows <= sample_rows;
      const int64_t n = whole ? rows : sample_rows;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t r = whole ? i : (n == 1 ? 0 : i * (rows - 1) / (n - 1));
        const char* src = static_cast<const char*>(t.data) + r * row_bytes;
        if (!Dequantize(t.dtype, src, row.data(), w.in_features).ok()) break;
        UP_RETURN_IF_ERROR(CheckFinite(row, what + " (row " + std::to_string(first_row + r) + ")"));
      }
    }
    first_row += rows;
  }
  return OkStatus();
}

Status CheckAttention(const AttentionWeights& a, const std::string& where) {
  UP_RETURN_IF_ERROR(CheckRows(a.q, where + "attention q", kSampleRows));
  UP_RETURN_IF_ERROR(CheckRows(a.k, where + "attention k", kSampleRows));
  UP_RETURN_IF_ERROR(CheckRows(a.v, where + "attention v", kSampleRows));
  UP_RETURN_IF_ERROR(CheckRows(a.o, where + "attention output", kSampleRows));
  UP_RETURN_IF_ERROR(CheckFinite(a.q_norm, where + "q norm"));
  return CheckFinite(a.k_norm, where + "k norm");
}

Status CheckDelta(const GatedDeltaNetWeights& d, const std::string& where) {
  UP_RETURN_IF_ERROR(CheckRows(d.in_proj_qkvz, where + "Gated DeltaNet in_proj_qkvz", kSampleRows));
  UP_RETURN_IF_ERROR(CheckRows(d.in_proj_ba, where + "Gated DeltaNet in_proj_ba", kSampleRows));
  UP_RETURN_IF_ERROR(CheckRows(d.out_proj, where + "Gated DeltaNet out_proj", kSampleRows));
  UP_RETURN_IF_ERROR(CheckFinite(d.conv_weight, where + "Gated DeltaNet conv1d"));
  UP_RETURN_IF_ERROR(CheckFinite(d.dt_bias, where + "Gated DeltaNet dt_bias"));
  UP_RETURN_IF_ERROR(CheckFinite(d.a_log, where + "Gated DeltaNet A_log"));
  return CheckFinite(d.norm, where + "Gated DeltaNet norm");
}

// Routed experts get two rows each (their first and last): a model has up to 512 per layer.
Status CheckMoe(const MoeWeights& m, const std::string& where) {
  UP_RETURN_IF_ERROR(CheckRows(m.router, where + "MoE router", kSampleRows));
  UP_RETURN_IF_ERROR(CheckRows(m.shared_gate_up, where + "shared expert gate_up", kSampleRows));
  UP_RETURN_IF_ERROR(CheckRows(m.shared_down, where + "shared expert down", kSampleRows));
  UP_RETURN_IF_ERROR(CheckRows(m.shared_expert_gate, where + "shared expert gate", kSampleRows));
  for (size_t e = 0; e < m.expert_gate_up.size(); ++e) {
    UP_RETURN_IF_ERROR(CheckRows(m.expert_gate_up[e],
                                 where + "expert " + std::to_string(e) + " gate_up", 2));
  }
  for (size_t e = 0; e < m.expert_down.size(); ++e) {
    UP_RETURN_IF_ERROR(
        CheckRows(m.expert_down[e], where + "expert " + std::to_string(e) + " down", 2));
  }
  return OkStatus();
}

Status CheckHyperParameters(const ModelConfig& c) {
  UP_RETURN_IF_ERROR(CheckHyper(c.rms_eps, 0.0, 0.1, "rms_epsilon (layer_norm_rms_epsilon)"));
  UP_RETURN_IF_ERROR(CheckHyper(c.rope_theta_global, 1.0, 1e12, "rope freq_base"));
  UP_RETURN_IF_ERROR(CheckHyper(c.rope_theta_local, 1.0, 1e12, "local rope freq_base"));
  UP_RETURN_IF_ERROR(CheckHyper(c.rope_scale_global, 0.0, 1e6, "rope scaling factor"));
  UP_RETURN_IF_ERROR(CheckHyper(c.embedding_scale, 0.0, 1e6, "embedding scale"));
  return CheckHyper(c.attention_scale, 0.0, 1e6, "attention scale");
}

// What is checked for NaN/Inf (a cheap probe, not a scan of the file): every value of the output
// norm; kSampleRows evenly spaced rows of the token embedding (first and last included); in the
// first and the last layer every norm weight (every value), every other small vector (q/k norms,
// DeltaNet conv1d, dt_bias, A_log, norm) and every projection (attention q, k, v, o; MLP gate_up,
// down; DeltaNet in/out projections; MoE router and shared expert), dequantized whole up to 1M
// values and kSampleRows rows beyond, and routed experts' first and last rows. Only weights
// resident on the host with a dequantizable type are probed (random-weight presets are not).
Status CheckEdgeWeights(const ModelDefinition& d) {
  UP_RETURN_IF_ERROR(CheckFinite(d.output_norm, "output norm"));
  UP_RETURN_IF_ERROR(CheckRows(d.token_embedding, "token embedding", kSampleRows));
  if (d.layers.empty()) return OkStatus();
  for (size_t i : {size_t{0}, d.layers.size() - 1}) {
    const LayerDefinition& L = d.layers[i];
    const std::string where = "layer " + std::to_string(i) + " ";
    UP_RETURN_IF_ERROR(CheckFinite(L.mixer_norm, where + "attention norm"));
    UP_RETURN_IF_ERROR(CheckFinite(L.ffn_norm, where + "FFN norm"));
    UP_RETURN_IF_ERROR(CheckFinite(L.post_mixer_norm, where + "post-attention norm"));
    UP_RETURN_IF_ERROR(CheckFinite(L.post_ffn_norm, where + "post-FFN norm"));
    if (L.attention) UP_RETURN_IF_ERROR(CheckAttention(*L.attention, where));
    if (L.delta) UP_RETURN_IF_ERROR(CheckDelta(*L.delta, where));
    if (L.ffn) {
      UP_RETURN_IF_ERROR(CheckRows(L.ffn->gate_up, where + "FFN gate_up", kSampleRows));
      UP_RETURN_IF_ERROR(CheckRows(L.ffn->down, where + "FFN down", kSampleRows));
    }
    if (L.moe) UP_RETURN_IF_ERROR(CheckMoe(*L.moe, where));
    if (d.layers.size() == 1) break;
  }
  return OkStatus();
}

Status CheckLinear(const ops::LinearWeight& w, int64_t out, int64_t in, const std::string& what) {
  if (w.out_features != out || w.in_features != in) {
    return InvalidArgument(what + " is [" + std::to_string(w.out_features) + ", " +
                           std::to_string(w.in_features) + "], expected [" + std::to_string(out) +
                           ", " + std::to_string(in) + "]");
  }
  if (w.parts.empty() && !w.is_random()) return InvalidArgument(what + " has no values");
  return OkStatus();
}

}  // namespace

Status ModelDefinition::Check() const {
  const ModelConfig& c = config;
  const int64_t H = c.hidden;
  if (static_cast<int>(layers.size()) != c.n_layers ||
      static_cast<int>(c.layer_kinds.size()) != c.n_layers) {
    return InvalidArgument("model definition: " + std::to_string(layers.size()) +
                           " layers for a config of " + std::to_string(c.n_layers));
  }
  const int64_t vocab_rows = vocab_sharded() ? vocab_end - vocab_begin : c.vocab_size;
  UP_RETURN_IF_ERROR(CheckLinear(token_embedding, vocab_rows, H, "the token embedding"));
  if (token_embedding.parts.size() > 1) {
    return InvalidArgument("model definition: the token embedding must be one tensor");
  }
  UP_RETURN_IF_ERROR(CheckLinear(head, vocab_rows, H, "the output head"));
  if (static_cast<int64_t>(output_norm.size()) != H) {
    return InvalidArgument("model definition: the output norm has the wrong length");
  }
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerDefinition& L = layers[i];
    const std::string where = "model definition, layer " + std::to_string(i);
    auto norm_ok = [&](const std::vector<float>& n, bool optional) {
      return (optional && n.empty()) || static_cast<int64_t>(n.size()) == H;
    };
    if (!norm_ok(L.mixer_norm, false) || !norm_ok(L.ffn_norm, false) ||
        !norm_ok(L.post_mixer_norm, true) || !norm_ok(L.post_ffn_norm, true)) {
      return InvalidArgument(where + ": a norm weight has the wrong length");
    }
    if (L.attention.has_value() == L.delta.has_value()) {
      return InvalidArgument(where + ": needs exactly one mixer (attention or Gated DeltaNet)");
    }
    if (L.ffn.has_value() == L.moe.has_value()) {
      return InvalidArgument(where + ": needs exactly one FFN (gated MLP or MoE)");
    }
    if (L.delta.has_value() != (c.layer_kinds[i] == LayerKind::kLinearAttention)) {
      return InvalidArgument(where + ": its mixer does not match the config's layer kind");
    }
  }
  UP_RETURN_IF_ERROR(CheckHyperParameters(c));
  return CheckEdgeWeights(*this);
}

std::vector<ops::LinearWeight*> LayerDefinition::LinearWeights() {
  std::vector<ops::LinearWeight*> ws;
  if (attention) ws = {&attention->q, &attention->k, &attention->v, &attention->o};
  if (delta) ws = {&delta->in_proj_qkvz, &delta->in_proj_ba, &delta->out_proj};
  if (ffn) {
    ws.push_back(&ffn->gate_up);
    ws.push_back(&ffn->down);
  }
  if (moe) {
    for (ops::LinearWeight* w : {&moe->router, &moe->shared_gate_up, &moe->shared_down,
                                 &moe->shared_expert_gate}) {
      ws.push_back(w);
    }
    for (ops::LinearWeight& w : moe->expert_gate_up) ws.push_back(&w);
    for (ops::LinearWeight& w : moe->expert_down) ws.push_back(&w);
  }
  return ws;
}

std::vector<const ops::LinearWeight*> LayerDefinition::LinearWeights() const {
  std::vector<const ops::LinearWeight*> ws;
  for (ops::LinearWeight* w : const_cast<LayerDefinition*>(this)->LinearWeights()) ws.push_back(w);
  return ws;
}

size_t ModelDefinition::HostWeightBytes() const {
  std::set<const void*> seen;  // a tied head shares the embedding's parts
  size_t bytes = host_copy_bytes;
  auto add = [&](const ops::LinearWeight& w) {
    for (const TensorView& p : w.parts) {
      if (seen.insert(p.data).second) bytes += static_cast<size_t>(DTypeBytes(p.dtype, p.numel()));
    }
  };
  add(token_embedding);
  add(head);
  for (const LayerDefinition& L : layers) {
    for (const ops::LinearWeight* w : L.LinearWeights()) add(*w);
  }
  return bytes;
}

namespace {

// madvise(MADV_DONTNEED) on the pages of [p, p + bytes), the start rounded down to a page (madvise
// rounds the end up). A hint: failure (an old kernel) only leaves the pages resident.
void DropPages(const uint8_t* p, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(p + bytes);
  (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace

void DropMappedRange(const ModelDefinition& d, const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (std::span<const uint8_t> f : d.mapped_files) {
    if (f.empty() || p < f.data() || p + bytes > f.data() + f.size()) continue;
    DropPages(p, bytes);
    return;
  }
}

void DropMappedPages(const ModelDefinition& d) {
  for (std::span<const uint8_t> f : d.mapped_files) {
    if (!f.empty()) DropPages(f.data(), f.size());
  }
}

}  // namespace uniprefill
