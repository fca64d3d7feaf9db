// A deliberately naive Gemma 3 for UniPrefill checks: one request, token lists held as plain
// vectors, every layer's keys/values in a per-layer list, the scalar reference ops, and a UniPrefill
// drop that *physically removes* the dropped rows (hidden state, positions) so later layers and
// later decodes can only ever see the kept tokens. Its selection is its own (the independent
// testing/selection_reference.h on its own queries and keys). Shares no code with the engine's
// forward or selection.
#pragma once

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "io/dequant.h"
#include "io/gguf.h"
#include "ops/reference.h"
#include "sparsity/token_selection.h"  // SelectionParams
#include "testing/selection_reference.h"

namespace uniprefill::testing {

class NaiveGemma3 {
 public:
  struct Options {
    std::vector<int> drop_layers;
    sparsity::SelectionParams selection;
  };

  NaiveGemma3(const gguf::GgufFile& f, Options o) : opt_(std::move(o)) {
    auto geti = [&](const char* k) { return static_cast<int>(*f.GetInt(std::string("gemma3.") + k)); };
    L_ = geti("block_count");
    H_ = geti("embedding_length");
    F_ = geti("feed_forward_length");
    Hq_ = geti("attention.head_count");
    Hkv_ = geti("attention.head_count_kv");
    D_ = geti("attention.key_length");
    W_ = geti("attention.sliding_window");
    embd_ = Dense(f, "token_embd.weight");
    V_ = static_cast<int>(embd_.size() / H_);
    out_norm_ = Dense(f, "output_norm.weight");
    for (int i = 0; i < L_; ++i) {
      const std::string p = "blk." + std::to_string(i) + ".";
      Layer l;
      for (auto [n, dst] : {std::pair{"attn_norm", &l.attn_norm}, {"post_attention_norm", &l.post_attn_norm},
                            {"ffn_norm", &l.ffn_norm}, {"post_ffw_norm", &l.post_ffn_norm},
                            {"attn_q_norm", &l.q_norm}, {"attn_k_norm", &l.k_norm},
                            {"attn_q", &l.q}, {"attn_k", &l.k}, {"attn_v", &l.v},
                            {"attn_output", &l.o}, {"ffn_gate", &l.gate}, {"ffn_up", &l.up},
                            {"ffn_down", &l.down}}) {
        *dst = Dense(f, p + n + ".weight");
      }
      layers_.push_back(std::move(l));
      keys_.emplace_back();
      values_.emplace_back();
      index_.emplace_back();
    }
    segment_len_.assign(opt_.drop_layers.size() + 1, 0);
  }

  int vocab() const { return V_; }
  const std::vector<int>& kept_counts() const { return kept_; }

  // Runs tokens (a prefill or one decode token) and returns the last token's logits.
  std::vector<float> Forward(const std::vector<int32_t>& tokens) {
    const int T = static_cast<int>(tokens.size());
    std::vector<float> x(size_t(T) * H_);
    ops::reference::Embedding(View(x, T, H_), View(embd_, V_, H_), tokens.data(),
                              std::sqrt(static_cast<float>(H_)));
    std::vector<int32_t> pos(T);
    for (int t = 0; t < T; ++t) pos[t] = length_ + t;
    int segment = 0;
    std::vector<int32_t> idx(T);
    for (int t = 0; t < T; ++t) idx[t] = segment_len_[0] + t;
    std::vector<int> rows_in_segment = {T};
    for (int i = 0; i < L_; ++i) {
      Layer& l = layers_[i];
      const int R = static_cast<int>(pos.size());
      const bool full = (i + 1) % 6 == 0;
      std::vector<float> h(size_t(R) * H_), q(size_t(R) * Hq_ * D_), k(size_t(R) * Hkv_ * D_),
          v(size_t(R) * Hkv_ * D_);
      ops::reference::RmsNorm(View(h, R, H_), View(x, R, H_), l.attn_norm.data(), 1e-6f);
      ops::reference::Linear(View(q, R, Hq_ * D_), View(h, R, H_), Weight(l.q, Hq_ * D_, H_));
      ops::reference::Linear(View(k, R, Hkv_ * D_), View(h, R, H_), Weight(l.k, Hkv_ * D_, H_));
      ops::reference::Linear(View(v, R, Hkv_ * D_), View(h, R, H_), Weight(l.v, Hkv_ * D_, H_));
      ops::reference::RmsNorm(View(q, R * Hq_, D_), View(q, R * Hq_, D_), l.q_norm.data(), 1e-6f);
      ops::reference::RmsNorm(View(k, R * Hkv_, D_), View(k, R * Hkv_, D_), l.k_norm.data(), 1e-6f);
      const std::vector<float> inv = ops::RopeInvFreq(full ? 1e6 : 1e4, D_);
      ops::reference::Rope(View3(q, R, Hq_, D_), pos.data(), inv.data(), D_, ops::RopeStyle::kNeox);
      ops::reference::Rope(View3(k, R, Hkv_, D_), pos.data(), inv.data(), D_, ops::RopeStyle::kNeox);
      keys_[i].insert(keys_[i].end(), k.begin(), k.end());
      values_[i].insert(values_[i].end(), v.begin(), v.end());
      index_[i].insert(index_[i].end(), idx.begin(), idx.end());
      const int N = static_cast<int>(index_[i].size());
      std::vector<float> attn(size_t(R) * Hq_ * D_);
      ops::AttentionParams ap;
      ap.scale = 1.0f / std::sqrt(static_cast<float>(D_));
      ap.window = full ? 0 : W_;
      ops::reference::Attention(View3(attn, R, Hq_, D_), View3(q, R, Hq_, D_),
                                View3(keys_[i], N, Hkv_, D_), View3(values_[i], N, Hkv_, D_),
                                idx.data(), index_[i].data(), ap);
      std::vector<float> a(size_t(R) * H_);
      ops::reference::Linear(View(a, R, H_), View(attn, R, Hq_ * D_), Weight(l.o, H_, Hq_ * D_));
      ops::reference::RmsNorm(View(a, R, H_), View(a, R, H_), l.post_attn_norm.data(), 1e-6f);
      ops::reference::Add(View(x, R, H_), View(x, R, H_), View(a, R, H_));
      if (IsDrop(i)) {
        std::vector<int32_t> keep;
        const sparsity::SelectionParams& p = opt_.selection;
        if (R > p.sink + p.last_n && length_ == 0) {
          // Scores over this prefill's rows: queries and keys exactly as cached above.
          const std::vector<double> importance = ReferenceTokenImportance(
              q.data(), k.data(), idx.data(), R, Hq_, Hkv_, D_, p.last_n, ap.scale);
          keep = ReferenceKeptTokens(importance, p);
          kept_.push_back(static_cast<int>(keep.size()));
        } else {
          for (int r = 0; r < R; ++r) keep.push_back(r);
        }
        // Physically remove the dropped rows.
        std::vector<float> nx;
        std::vector<int32_t> npos;
        for (int32_t r : keep) {
          nx.insert(nx.end(), x.begin() + size_t(r) * H_, x.begin() + size_t(r + 1) * H_);
          npos.push_back(pos[r]);
        }
        x = std::move(nx);
        pos = std::move(npos);
        ++segment;
        idx.resize(pos.size());
        for (size_t r = 0; r < pos.size(); ++r) idx[r] = segment_len_[segment] + static_cast<int>(r);
        rows_in_segment.push_back(static_cast<int>(pos.size()));
      }
      const int R2 = static_cast<int>(pos.size());
      std::vector<float> h2(size_t(R2) * H_), g(size_t(R2) * F_), u(size_t(R2) * F_),
          f(size_t(R2) * H_);
      ops::reference::RmsNorm(View(h2, R2, H_), View(x, R2, H_), l.ffn_norm.data(), 1e-6f);
      ops::reference::Linear(View(g, R2, F_), View(h2, R2, H_), Weight(l.gate, F_, H_));
      ops::reference::Linear(View(u, R2, F_), View(h2, R2, H_), Weight(l.up, F_, H_));
      ops::reference::GatedActivation(View(g, R2, F_), View(g, R2, F_), View(u, R2, F_),
                                      ops::Activation::kGeluTanh);
      ops::reference::Linear(View(f, R2, H_), View(g, R2, F_), Weight(l.down, H_, F_));
      ops::reference::RmsNorm(View(f, R2, H_), View(f, R2, H_), l.post_ffn_norm.data(), 1e-6f);
      ops::reference::Add(View(x, R2, H_), View(x, R2, H_), View(f, R2, H_));
    }
    for (size_t s = 0; s < rows_in_segment.size(); ++s) segment_len_[s] += rows_in_segment[s];
    length_ += T;
    std::vector<float> last(x.end() - H_, x.end()), logits(V_);
    ops::reference::RmsNorm(View(last, 1, H_), View(last, 1, H_), out_norm_.data(), 1e-6f);
    ops::reference::Linear(View(logits, 1, V_), View(last, 1, H_), Weight(embd_, V_, H_));
    return logits;
  }

  // Entries cached per layer (the tokens alive in that layer's segment).
  int cached(int layer) const { return static_cast<int>(index_[layer].size()); }

 private:
  struct Layer {
    std::vector<float> attn_norm, post_attn_norm, ffn_norm, post_ffn_norm, q_norm, k_norm;
    std::vector<float> q, k, v, o, gate, up, down;
  };
  static std::vector<float> Dense(const gguf::GgufFile& f, const std::string& name) {
    const gguf::TensorInfo* t = f.FindTensor(name);
    std::vector<float> out(t->numel());
    (void)Dequantize(t->type, t->data, out.data(), t->numel());
    return out;
  }
  static TensorView View(std::vector<float>& v, int64_t r, int64_t c) {
    return TensorView::Contiguous(v.data(), DType::kF32, {r, c});
  }
  static TensorView View3(std::vector<float>& v, int64_t a, int64_t b, int64_t c) {
    return TensorView::Contiguous(v.data(), DType::kF32, {a, b, c});
  }
  static ops::LinearWeight Weight(std::vector<float>& w, int64_t out, int64_t in) {
    ops::LinearWeight lw;
    lw.parts = {TensorView::Contiguous(w.data(), DType::kF32, {out, in})};
    lw.out_features = out;
    lw.in_features = in;
    return lw;
  }
  bool IsDrop(int i) const {
    for (int d : opt_.drop_layers) {
      if (d == i) return true;
    }
    return false;
  }

  Options opt_;
  int L_ = 0, H_ = 0, F_ = 0, Hq_ = 0, Hkv_ = 0, D_ = 0, W_ = 0, V_ = 0;
  std::vector<float> embd_, out_norm_;
  std::vector<Layer> layers_;
  std::vector<std::vector<float>> keys_, values_;
  std::vector<std::vector<int32_t>> index_;
  std::vector<int> segment_len_;
  std::vector<int> kept_;
  int length_ = 0;
};

}  // namespace uniprefill::testing
