#include "tokenizer/tokenizer.h"

namespace uniprefill::tokenizer {
namespace {

class IdsOnly final : public TextTokenizer {
 public:
  IdsOnly(int32_t vocab, int32_t eos) : vocab_(vocab), eos_(eos) {}
  bool can_encode() const override { return false; }
  std::vector<int32_t> Encode(std::string_view, bool, bool) const override { return {}; }
  std::string Decode(std::span<const int32_t> ids) const override {
    std::string s;
    for (int32_t id : ids) s += TokenToPiece(id, true);
    return s;
  }
  std::string TokenToPiece(int32_t id, bool) const override {
    return "<" + std::to_string(id) + ">";
  }
  bool IsEndOfGeneration(int32_t id) const override { return id == eos_; }
  int32_t vocab_size() const override { return vocab_; }

 private:
  int32_t vocab_, eos_;
};

}  // namespace

std::unique_ptr<TextTokenizer> IdsOnlyTokenizer(int32_t vocab_size, int32_t eos_id) {
  return std::make_unique<IdsOnly>(vocab_size, eos_id);
}

}  // namespace uniprefill::tokenizer
