#include "model/model_definition.h"

#include <cmath>
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

// The first and last rows of a CPU-resident weight, dequantized: a cheap probe for a damaged
// tensor (a whole-file scan would cost seconds on a large model). Others are skipped.
Status CheckEdgeRows(const ops::LinearWeight& w, const std::string& what) {
  if (w.parts.size() != 1) return OkStatus();
  const TensorView& t = w.parts[0];
  if (t.device != Device::kCpu || !t.data || !CanDequantize(t.dtype)) return OkStatus();
  const int64_t row_bytes = DTypeBytes(t.dtype, w.in_features);
  std::vector<float> row(static_cast<size_t>(w.in_features));
  for (int64_t r : {int64_t{0}, w.out_features - 1}) {
    const char* src = static_cast<const char*>(t.data) + r * row_bytes;
    if (!Dequantize(t.dtype, src, row.data(), w.in_features).ok()) return OkStatus();
    UP_RETURN_IF_ERROR(CheckFinite(row, what + " (row " + std::to_string(r) + ")"));
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

// What is checked for NaN/Inf: the norm weights of the first and the last layer and the output
// norm (every value), and the first and last rows of the token embedding.
Status CheckEdgeWeights(const ModelDefinition& d) {
  UP_RETURN_IF_ERROR(CheckFinite(d.output_norm, "output norm"));
  UP_RETURN_IF_ERROR(CheckEdgeRows(d.token_embedding, "token embedding"));
  if (d.layers.empty()) return OkStatus();
  for (size_t i : {size_t{0}, d.layers.size() - 1}) {
    const LayerDefinition& L = d.layers[i];
    const std::string where = "layer " + std::to_string(i) + " ";
    UP_RETURN_IF_ERROR(CheckFinite(L.mixer_norm, where + "attention norm"));
    UP_RETURN_IF_ERROR(CheckFinite(L.ffn_norm, where + "FFN norm"));
    UP_RETURN_IF_ERROR(CheckFinite(L.post_mixer_norm, where + "post-attention norm"));
    UP_RETURN_IF_ERROR(CheckFinite(L.post_ffn_norm, where + "post-FFN norm"));
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
  UP_RETURN_IF_ERROR(CheckLinear(token_embedding, c.vocab_size, H, "the token embedding"));
  if (token_embedding.parts.size() > 1) {
    return InvalidArgument("model definition: the token embedding must be one tensor");
  }
  UP_RETURN_IF_ERROR(CheckLinear(head, c.vocab_size, H, "the output head"));
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

}  // namespace uniprefill
