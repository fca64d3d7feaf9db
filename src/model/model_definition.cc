#include "model/model_definition.h"

#include <string>

namespace uniprefill {
namespace {

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
  return OkStatus();
}

}  // namespace uniprefill
