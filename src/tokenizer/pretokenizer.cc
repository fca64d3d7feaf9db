#include "tokenizer/pretokenizer.h"

#include "tokenizer/unicode.h"

namespace uniprefill::tokenizer {
namespace {

constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The classes the regexes distinguish. kNewline is \r or \n (also \s); kSpace is the rest of \s.
enum class Class : uint8_t { kLetter, kNumber, kSpace, kNewline, kOther };

struct Char {
  uint32_t cp;
  uint32_t length;
  Class cls;
};

// Reads the characters of one text; pos is a byte offset, every step moves by whole characters.
class CharReader {
 public:
  explicit CharReader(std::string_view text) : text_(text) {}

 protected:
  Char At(size_t pos) const {
    if (pos >= text_.size()) return {0, 0, Class::kOther};
    const unicode::DecodedChar d = unicode::DecodeUtf8(text_, pos);
    Class cls = Class::kOther;
    if (d.code_point == '\r' || d.code_point == '\n') {
      cls = Class::kNewline;
    } else if (unicode::IsLetter(d.code_point)) {
      cls = Class::kLetter;
    } else if (unicode::IsNumber(d.code_point)) {
      cls = Class::kNumber;
    } else if (unicode::IsSpace(d.code_point)) {
      cls = Class::kSpace;
    }
    return {d.code_point, d.length, cls};
  }

  size_t SkipClass(size_t pos, Class cls) const {
    for (Char c = At(pos); c.length != 0 && c.cls == cls; c = At(pos)) pos += c.length;
    return pos;
  }

  static bool IsWhitespace(Class cls) { return cls == Class::kSpace || cls == Class::kNewline; }

  std::string_view text_;
};

// The Llama 3 / Qwen2 regexes (they differ only in the digit count of \p{N}{1,max_digits}).
class Scanner : public CharReader {
 public:
  Scanner(std::string_view text, int max_digits) : CharReader(text), max_digits_(max_digits) {}

  void Run(std::vector<std::string_view>* out) {
    for (size_t pos = 0; pos < text_.size();) {
      const size_t end = MatchAt(pos);
      out->push_back(text_.substr(pos, end - pos));
      pos = end;
    }
  }

 private:
  // (?i:'s|'t|'re|'ve|'m|'ll|'d): the end of the match at `pos` (an apostrophe), or 0.
  size_t Contraction(size_t pos) const {
    const Char c1 = At(pos + 1);
    const uint32_t a = c1.cp < 0x80 ? (c1.cp | 0x20) : c1.cp;
    // Oniguruma folds U+017F LATIN SMALL LETTER LONG S to 's'.
    if (a == 's' || a == 't' || a == 'm' || a == 'd' || c1.cp == 0x17F) return pos + 1 + c1.length;
    if (a == 'r' || a == 'v' || a == 'l') {
      const Char c2 = At(pos + 2);
      const uint32_t b = c2.cp < 0x80 ? (c2.cp | 0x20) : c2.cp;
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
        return pos + 3;
      }
    }
    return 0;
  }

  // The end of the pre-token that starts at `pos`: the first regex alternative that matches.
  size_t MatchAt(size_t pos) const {
    const Char c0 = At(pos);
    if (c0.cp == '\'') {
      if (const size_t end = Contraction(pos); end != 0) return end;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (c0.cls == Class::kLetter) return SkipClass(pos, Class::kLetter);
    if (c0.cls == Class::kSpace || c0.cls == Class::kOther) {
      if (At(pos + c0.length).cls == Class::kLetter) {
        return SkipClass(pos + c0.length, Class::kLetter);
      }
    }
    // \p{N}{1,max_digits}
    if (c0.cls == Class::kNumber) {
      size_t end = pos;
      for (int i = 0; i < max_digits_; ++i) {
        const Char c = At(end);
        if (c.length == 0 || c.cls != Class::kNumber) break;
        end += c.length;
      }
      return end;
    }
    // " ?[^\s\p{L}\p{N}]+[\r\n]*"
    size_t other = pos;
    if (c0.cp == ' ' && At(pos + 1).cls == Class::kOther) other = pos + 1;
    if (At(other).cls == Class::kOther) {
      return SkipClass(SkipClass(other, Class::kOther), Class::kNewline);
    }
    // c0 is whitespace: look at the whole run.
    size_t run_end = pos, last_newline_end = 0, last_char = pos;
    for (Char c = At(pos); c.length != 0 && (c.cls == Class::kSpace || c.cls == Class::kNewline);
         c = At(run_end)) {
      last_char = run_end;
      run_end += c.length;
      if (c.cls == Class::kNewline) last_newline_end = run_end;
    }
    // \s*[\r\n]+ : up to the run's last newline.
    if (last_newline_end != 0) return last_newline_end;
    // \s+(?!\S) : the run, less its last character when something other than space follows.
    if (run_end == text_.size()) return run_end;
    if (last_char > pos) return last_char;
    // \s+ : a single space character before a non-space.
    return run_end;
  }

  int max_digits_;
};

// The GPT-2 regex over one digit-free run (kDigitsGpt2):
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// The " ?" prefixes are the ASCII space only; \s is any whitespace, newlines included.
class Gpt2Scanner : public CharReader {
 public:
  explicit Gpt2Scanner(std::string_view text) : CharReader(text) {}

  void Run(std::vector<std::string_view>* out) {
    for (size_t pos = 0; pos < text_.size();) {
      const size_t end = MatchAt(pos);
      out->push_back(text_.substr(pos, end - pos));
      pos = end;
    }
  }

 private:
  // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive): the end of the match at `pos` (an apostrophe), or 0.
  size_t Contraction(size_t pos) const {
    const char c1 = pos + 1 < text_.size() ? text_[pos + 1] : '\0';
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return pos + 2;
    const char c2 = pos + 2 < text_.size() ? text_[pos + 2] : '\0';
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
      return pos + 3;
    }
    return 0;
  }

  size_t MatchAt(size_t pos) const {
    const Char c0 = At(pos);
    if (c0.cp == '\'') {
      if (const size_t end = Contraction(pos); end != 0) return end;
    }
    // " ?X+" for X = letters, numbers, or neither (and not whitespace).
    const size_t body = c0.cp == ' ' && !IsWhitespace(At(pos + 1).cls) && At(pos + 1).length != 0
                            ? pos + 1
                            : pos;
    const Class cls = At(body).cls;
    if (!IsWhitespace(cls)) return SkipClass(body, cls);
    // Whitespace: \s+(?!\S) takes the run (less its last character when a non-space follows);
    // a single whitespace character before a non-space is \s+.
    size_t run_end = pos, last_char = pos;
    for (Char c = At(pos); c.length != 0 && IsWhitespace(c.cls); c = At(run_end)) {
      last_char = run_end;
      run_end += c.length;
    }
    if (run_end == text_.size() || last_char == pos) return run_end;
    return last_char;
  }
};

// Digits(individual_digits) first: each \p{N} character alone, the runs between them to GPT-2.
void PreTokenizeDigitsGpt2(std::string_view text, std::vector<std::string_view>* out) {
  size_t run_begin = 0;
  for (size_t pos = 0; pos < text.size();) {
    const unicode::DecodedChar d = unicode::DecodeUtf8(text, pos);
    if (unicode::IsNumber(d.code_point)) {
      if (pos > run_begin) Gpt2Scanner(text.substr(run_begin, pos - run_begin)).Run(out);
      out->push_back(text.substr(pos, d.length));
      run_begin = pos + d.length;
    }
    pos += d.length;
  }
  if (run_begin < text.size()) Gpt2Scanner(text.substr(run_begin)).Run(out);
}

}  // namespace

std::optional<PreTokenizerKind> RecognisePattern(std::string_view pattern) {
  if (pattern == kLlama3Pattern) return PreTokenizerKind::kLlama3;
  if (pattern == kQwen2Pattern) return PreTokenizerKind::kQwen2;
  return std::nullopt;  // kDigitsGpt2 is not a Split regex
}

const char* PreTokenizerName(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::kLlama3:
      return "llama3";
    case PreTokenizerKind::kQwen2:
      return "qwen2";
    case PreTokenizerKind::kDigitsGpt2:
      return "digits+gpt2";
  }
  return "?";
}

void PreTokenize(PreTokenizerKind kind, std::string_view text, std::vector<std::string_view>* out) {
  switch (kind) {
    case PreTokenizerKind::kLlama3: Scanner(text, 3).Run(out); return;
    case PreTokenizerKind::kQwen2: Scanner(text, 1).Run(out); return;
    case PreTokenizerKind::kDigitsGpt2: PreTokenizeDigitsGpt2(text, out); return;
  }
}

}  // namespace uniprefill::tokenizer
