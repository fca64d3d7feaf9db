// TextTokenizer: what the engine needs from a tokenizer, whichever kind the model came with
// (SentencePiece-style from GGUF, byte-level BPE from tokenizer.json, or none: token ids only).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_template.h"

namespace uniprefill::tokenizer {

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;
  // False for a model without a tokenizer (prompts must then be token ids).
  virtual bool can_encode() const { return true; }
  virtual std::vector<int32_t> Encode(std::string_view text, bool add_bos,
                                      bool parse_special) const = 0;
  virtual std::string Decode(std::span<const int32_t> ids) const = 0;
  // The bytes of one token: the unit of streaming output.
  virtual std::string TokenToPiece(int32_t id, bool render_special) const = 0;
  virtual bool IsEndOfGeneration(int32_t id) const = 0;
  virtual int32_t vocab_size() const = 0;

  // The chat template that came with the vocabulary (the GGUF's tokenizer.chat_template, or the
  // architecture's default), kept here as Hugging Face keeps it in tokenizer_config.json;
  // nullopt when the model has none we can render.
  const std::optional<ChatTemplate>& chat_template() const { return chat_template_; }
  void set_chat_template(std::optional<ChatTemplate> t) { chat_template_ = std::move(t); }

 private:
  std::optional<ChatTemplate> chat_template_;
};

// Adapts a concrete tokenizer (SpmTokenizer, BpeTokenizer) to the interface.
template <typename T>
class TokenizerAdapter final : public TextTokenizer {
 public:
  explicit TokenizerAdapter(T impl) : impl_(std::move(impl)) {}
  std::vector<int32_t> Encode(std::string_view text, bool add_bos,
                              bool parse_special) const override {
    return impl_.Encode(text, add_bos, parse_special);
  }
  std::string Decode(std::span<const int32_t> ids) const override { return impl_.Decode(ids); }
  std::string TokenToPiece(int32_t id, bool render_special) const override {
    return impl_.TokenToPiece(id, render_special);
  }
  bool IsEndOfGeneration(int32_t id) const override { return impl_.IsEndOfGeneration(id); }
  int32_t vocab_size() const override { return impl_.vocab_size(); }
  const T& impl() const { return impl_; }

 private:
  T impl_;
};

// For checkpoints shipped without tokenizer.json: no encoding; tokens render as "<id>".
std::unique_ptr<TextTokenizer> IdsOnlyTokenizer(int32_t vocab_size, int32_t eos_id);

}  // namespace uniprefill::tokenizer
