// A tiny random-weight Gemma 3 GGUF for fast model and command-line tests: 6 layers (5 sliding,
// one full), hidden 256, 2 heads / 1 kv head of 128, ffn 512, window 8, a 262-token vocabulary
// (4 specials, 256 byte tokens, 2 words). Options corrupt it in the ways users' files go wrong.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "io/dequant.h"
#include "io/gguf_builder.h"

namespace uniprefill::testing {

struct TinyGemma3Options {
  std::string architecture = "gemma3";
  int context_length = 2048;
  bool q2k_attn_q = false;       // write blk.0.attn_q as Q2_K (unsupported quant type)
  bool wrong_ffn_shape = false;  // blk.1.ffn_up gets [ffn + 256, hidden]
  bool drop_output_norm = false;
  uint32_t seed = 1;
  int layers = 6;   // full attention at every 6th layer (5, 11, ...)
  int window = 8;
};

inline std::vector<uint8_t> F32Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Q8_0 blocks for `v` (size a multiple of 32): per block d = max|x| / 127, q = round(x / d).
inline std::vector<uint8_t> Q8_0Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out;
  for (size_t b = 0; b < v.size(); b += 32) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[b + i]));
    const float d = amax / 127.0f;
    const uint16_t dh = FloatToHalf(d);
    out.push_back(dh & 0xFF);
    out.push_back(dh >> 8);
    const float inv = d ? 1.0f / HalfToFloat(dh) : 0.0f;
    for (int i = 0; i < 32; ++i) {
      out.push_back(static_cast<uint8_t>(static_cast<int8_t>(std::lround(v[b + i] * inv))));
    }
  }
  return out;
}

inline std::vector<uint8_t> BuildTinyGemma3(const TinyGemma3Options& o = {}) {
  using gguf::testing::GgufBuilder;
  using gguf::testing::Val;
  namespace t = gguf::testing;
  const uint64_t H = 256, F = 512, Hq = 2, Hkv = 1, D = 128, V = 262;
  const uint64_t L = static_cast<uint64_t>(o.layers);
  std::mt19937 rng(o.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto randn = [&](size_t n, float scale) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng) * scale;
    return v;
  };
  auto ones_ish = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = 1.0f + 0.1f * normal(rng);
    return v;
  };

  GgufBuilder b;
  const std::string a = o.architecture;
  b.Kv("general.architecture", Val::Str(a));
  b.Kv("general.name", Val::Str("tiny-gemma3-test"));
  b.Kv(a + ".context_length", Val::U32(o.context_length));
  b.Kv(a + ".embedding_length", Val::U32(H));
  b.Kv(a + ".block_count", Val::U32(L));
  b.Kv(a + ".feed_forward_length", Val::U32(F));
  b.Kv(a + ".attention.head_count", Val::U32(Hq));
  b.Kv(a + ".attention.head_count_kv", Val::U32(Hkv));
  b.Kv(a + ".attention.key_length", Val::U32(D));
  b.Kv(a + ".attention.value_length", Val::U32(D));
  b.Kv(a + ".attention.layer_norm_rms_epsilon", Val::F32(1e-6f));
  b.Kv(a + ".attention.sliding_window", Val::U32(o.window));
  b.Kv(a + ".rope.freq_base", Val::F32(1e6f));
  // Vocabulary: <pad> <eos> <bos> <unk>, 256 byte tokens, two words.
  std::vector<Val> tokens, scores, types;
  auto add = [&](const std::string& s, float score, int32_t type) {
    tokens.push_back(Val::Str(s));
    scores.push_back(Val::F32(score));
    types.push_back(Val::I32(type));
  };
  add("<pad>", 0, 3);
  add("<eos>", 0, 3);
  add("<bos>", 0, 3);
  add("<unk>", 0, 2);
  for (int i = 0; i < 256; ++i) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", i);
    add(name, 0, 6);
  }
  add("\xE2\x96\x81the", -1.0f, 1);
  add("he", -2.0f, 1);
  b.Kv("tokenizer.ggml.model", Val::Str("llama"));
  b.Kv("tokenizer.ggml.tokens", Val::Arr(t::kTString, tokens));
  b.Kv("tokenizer.ggml.scores", Val::Arr(t::kTF32, scores));
  b.Kv("tokenizer.ggml.token_type", Val::Arr(t::kTI32, types));
  b.Kv("tokenizer.ggml.bos_token_id", Val::U32(2));
  b.Kv("tokenizer.ggml.eos_token_id", Val::U32(1));
  b.Kv("tokenizer.ggml.unknown_token_id", Val::U32(3));
  b.Kv("tokenizer.ggml.padding_token_id", Val::U32(0));
  b.Kv("tokenizer.ggml.add_bos_token", Val::Bool(true));
  b.Kv("tokenizer.ggml.add_eos_token", Val::Bool(false));
  b.Kv("tokenizer.ggml.add_space_prefix", Val::Bool(false));

  constexpr uint32_t kF32 = 0, kQ8_0 = 8, kQ2_K = 10;
  b.Tensor("token_embd.weight", {H, V}, kQ8_0, Q8_0Bytes(randn(H * V, 0.05f)));
  if (!o.drop_output_norm) b.Tensor("output_norm.weight", {H}, kF32, F32Bytes(ones_ish(H)));
  for (uint64_t i = 0; i < L; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    for (const char* n : {"attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"}) {
      b.Tensor(p + n + ".weight", {H}, kF32, F32Bytes(ones_ish(H)));
    }
    b.Tensor(p + "attn_q_norm.weight", {D}, kF32, F32Bytes(ones_ish(D)));
    b.Tensor(p + "attn_k_norm.weight", {D}, kF32, F32Bytes(ones_ish(D)));
    const float s = 1.0f / std::sqrt(float(H));
    if (o.q2k_attn_q && i == 0) {
      b.Tensor(p + "attn_q.weight", {H, Hq * D}, kQ2_K, std::vector<uint8_t>(84 * Hq * D, 0));
    } else {
      b.Tensor(p + "attn_q.weight", {H, Hq * D}, kQ8_0, Q8_0Bytes(randn(H * Hq * D, s)));
    }
    b.Tensor(p + "attn_k.weight", {H, Hkv * D}, kQ8_0, Q8_0Bytes(randn(H * Hkv * D, s)));
    b.Tensor(p + "attn_v.weight", {H, Hkv * D}, kF32, F32Bytes(randn(H * Hkv * D, s)));
    b.Tensor(p + "attn_output.weight", {Hq * D, H}, kQ8_0, Q8_0Bytes(randn(Hq * D * H, s)));
    b.Tensor(p + "ffn_gate.weight", {H, F}, kQ8_0, Q8_0Bytes(randn(H * F, s)));
    const uint64_t up_rows = (o.wrong_ffn_shape && i == 1) ? F + 256 : F;
    b.Tensor(p + "ffn_up.weight", {H, up_rows}, kQ8_0, Q8_0Bytes(randn(H * up_rows, s)));
    b.Tensor(p + "ffn_down.weight", {F, H}, kF32, F32Bytes(randn(F * H, 1.0f / std::sqrt(float(F)))));
  }
  return b.Build();
}

// A path in the test temp dir unique to this process: CTest runs tests as parallel processes, and
// rewriting a file another process has mmap'd would crash it (SIGBUS).
inline std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "up_" + std::to_string(getpid()) + "_" + name;
}

inline std::string WriteTempFile(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = TempPath(name);
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  return path;
}

}  // namespace uniprefill::testing
