#include "tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "io/gguf.h"

namespace uniprefill::tokenizer {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

// Character length from the lead byte's high nibble, exactly llama.cpp's unicode_len_utf8:
// continuation and invalid lead bytes count as 1-byte characters, and the bytes that follow a lead
// byte are taken without checking that they are continuation bytes.
size_t Utf8Len(char lead) {
  static constexpr uint8_t kLookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLookup[static_cast<uint8_t>(lead) >> 4];
}

// One symbol of the merge list: a byte range of the escaped text, linked to its neighbours.
struct Symbol {
  int32_t prev;
  int32_t next;
  uint32_t offset;
  uint32_t n;  // bytes; 0 once merged into its left neighbour
};

struct Bigram {
  int32_t left;
  int32_t right;
  float score;
  uint32_t size;
};

// Highest score first; among equal scores the leftmost (llama.cpp's llm_bigram_spm::comparator).
struct BigramLess {
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  }
};

}  // namespace

SpmTokenizer::SpmTokenizer(Vocab vocab) : vocab_(std::move(vocab)) {
  special_rank_.assign(vocab_.size(), -1);
  trie_.emplace_back();
  const std::vector<int32_t>& specials = vocab_.special_tokens();
  for (size_t rank = 0; rank < specials.size(); ++rank) {
    const int32_t id = specials[rank];
    special_rank_[id] = static_cast<int32_t>(rank);
    int32_t node = 0;
    for (char c : vocab_.text(id)) {
      const uint8_t b = static_cast<uint8_t>(c);
      int32_t child = Child(node, b);
      if (child < 0) {
        child = static_cast<int32_t>(trie_.size());
        trie_.emplace_back();
        auto& kids = trie_[node].children;
        kids.insert(std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t{0})),
                    {b, child});
      }
      node = child;
    }
    trie_[node].token = id;
  }
}

Result<SpmTokenizer> SpmTokenizer::FromVocab(Vocab vocab) {
  if (vocab.model() != "llama") {
    return Unimplemented("tokenizer: SpmTokenizer needs a 'llama' (SentencePiece) vocabulary, got '" +
                         vocab.model() + "'");
  }
  return SpmTokenizer(std::move(vocab));
}

Result<SpmTokenizer> SpmTokenizer::FromGguf(const gguf::GgufFile& file) {
  UP_ASSIGN_OR_RETURN(Vocab vocab, Vocab::FromGguf(file));
  return FromVocab(std::move(vocab));
}

int32_t SpmTokenizer::Child(int32_t node, uint8_t byte) const {
  const auto& kids = trie_[node].children;
  auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(byte, int32_t{0}));
  return (it != kids.end() && it->first == byte) ? it->second : -1;
}

// Equivalent to llama.cpp's tokenizer_st_partition without its O(#specials x text) scans: find
// every occurrence of every special token with the trie, then let tokens claim them in priority
// order, each taking its leftmost non-overlapping matches that lie wholly in unclaimed text.
std::vector<SpmTokenizer::Fragment> SpmTokenizer::SplitSpecial(std::string_view text,
                                                               bool parse_special) const {
  const uint32_t skip = parse_special ? 0u : (kAttrControl | kAttrUnknown);
  // Every match of every allowed special token, bucketed by rank (a counting sort: a text of n
  // spaces holds ~31 n matches, too many to sort), positions ascending within a bucket.
  const std::vector<int32_t>& specials = vocab_.special_tokens();
  std::vector<size_t> bucket_start(specials.size() + 1, 0);
  auto for_each_match = [&](auto&& fn) {
    for (size_t pos = 0; pos < text.size(); ++pos) {
      int32_t node = 0;
      for (size_t k = pos; k < text.size(); ++k) {
        node = Child(node, static_cast<uint8_t>(text[k]));
        if (node < 0) break;
        const int32_t id = trie_[node].token;
        if (id >= 0 && (vocab_.attr(id) & skip) == 0) fn(special_rank_[id], pos);
      }
    }
  };
  size_t n_matches = 0;
  for_each_match([&](int32_t rank, size_t) {
    ++bucket_start[rank + 1];
    ++n_matches;
  });
  std::vector<Fragment> fragments;
  if (n_matches == 0) {
    if (!text.empty()) fragments.push_back({-1, 0, text.size()});
    return fragments;
  }
  for (size_t r = 1; r < bucket_start.size(); ++r) bucket_start[r] += bucket_start[r - 1];
  std::vector<uint32_t> positions(n_matches);
  {
    std::vector<size_t> cursor(bucket_start.begin(), bucket_start.end() - 1);
    for_each_match([&](int32_t rank, size_t pos) {
      positions[cursor[rank]++] = static_cast<uint32_t>(pos);
    });
  }

  std::vector<int32_t> claimed(text.size(), -2);  // -2 free, -1 inside a token, else token start
  for (size_t rank = 0; rank < specials.size(); ++rank) {
    const int32_t id = specials[rank];
    const size_t len = vocab_.text(id).size();
    size_t last_end = 0;
    for (size_t i = bucket_start[rank]; i < bucket_start[rank + 1]; ++i) {
      const size_t pos = positions[i];
      if (pos < last_end) continue;
      bool free = true;
      for (size_t k = pos; k < pos + len && free; ++k) free = claimed[k] == -2;
      if (!free) continue;
      claimed[pos] = id;
      std::fill(claimed.begin() + pos + 1, claimed.begin() + pos + len, -1);
      last_end = pos + len;
    }
  }

  size_t pos = 0;
  while (pos < text.size()) {
    if (claimed[pos] >= 0) {
      fragments.push_back({claimed[pos], pos, pos + vocab_.text(claimed[pos]).size()});
      pos = fragments.back().end;
      continue;
    }
    size_t end = pos;
    while (end < text.size() && claimed[end] == -2) ++end;
    fragments.push_back({-1, pos, end});
    pos = end;
  }
  return fragments;
}

void SpmTokenizer::EncodeRaw(std::string_view raw, bool space_prefix,
                             std::vector<int32_t>* out) const {
  std::string text;
  text.reserve(raw.size() + raw.size() / 2 + 3);
  if (space_prefix) text += kSpaceMarker;
  for (char c : raw) {
    if (c == ' ') {
      text += kSpaceMarker;
    } else {
      text += c;
    }
  }
  if (text.empty()) return;

  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offs = 0; offs < text.size();) {
    const size_t n = std::min(Utf8Len(text[offs]), text.size() - offs);
    const int32_t index = static_cast<int32_t>(symbols.size());
    offs += n;
    symbols.push_back({index - 1, offs == text.size() ? -1 : index + 1,
                       static_cast<uint32_t>(offs - n), static_cast<uint32_t>(n)});
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const size_t size = symbols[left].n + symbols[right].n;
    if (size > vocab_.max_token_bytes()) return;
    const int32_t id = vocab_.Find(std::string_view(text.data() + symbols[left].offset, size));
    if (id < 0) return;
    queue.push({left, right, vocab_.score(id), static_cast<uint32_t>(size)});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Stale entry: one side was merged away or grew since the pair was queued.
    if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.size) continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  // Every surviving symbol is a vocab token (a merge result) or a single character; a character
  // missing from the vocab falls back to one byte token per byte.
  for (int32_t i = 0; i != -1; i = symbols[i].next) {
    const std::string_view piece(text.data() + symbols[i].offset, symbols[i].n);
    const int32_t id = vocab_.Find(piece);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    for (char c : piece) {
      const int32_t byte_id = vocab_.ByteToken(static_cast<uint8_t>(c));
      // llama.cpp aborts on a vocab without byte tokens; we degrade to <unk> (or drop the byte).
      if (byte_id >= 0) {
        out->push_back(byte_id);
      } else if (vocab_.unk() >= 0) {
        out->push_back(vocab_.unk());
      }
    }
  }
}

std::vector<int32_t> SpmTokenizer::Encode(std::string_view text, bool add_special,
                                          bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && vocab_.add_bos()) out.push_back(vocab_.bos());
  bool prev_special = true;  // llama.cpp: a space prefix goes on the first fragment too
  for (const Fragment& f : SplitSpecial(text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
    } else {
      EncodeRaw(text.substr(f.begin, f.end - f.begin), vocab_.add_space_prefix() && prev_special,
                &out);
      prev_special = false;
    }
  }
  if (add_special && vocab_.add_eos()) out.push_back(vocab_.eos());
  return out;
}

void SpmTokenizer::AppendPiece(int32_t id, bool render_special, bool strip_space,
                               std::string* out) const {
  if (!vocab_.IsValid(id)) return;
  const uint32_t attr = vocab_.attr(id);
  const std::string& text = vocab_.text(id);
  const size_t start = out->size();
  if (attr & (kAttrControl | kAttrUnknown)) {
    if (!render_special) return;
    *out += text;
  } else if (attr & kAttrUserDefined) {
    *out += text;
  } else if (attr & kAttrNormal) {
    for (size_t i = 0; i < text.size();) {
      if (text.compare(i, kSpaceMarker.size(), kSpaceMarker) == 0) {
        *out += ' ';
        i += kSpaceMarker.size();
      } else {
        *out += text[i++];
      }
    }
  } else if (attr & kAttrByte) {
    *out += static_cast<char>(vocab_.TokenToByte(id));
  }
  // Unused and undefined tokens render as nothing (as in llama.cpp).
  if (strip_space && out->size() > start && (*out)[start] == ' ') out->erase(start, 1);
}

std::string SpmTokenizer::TokenToPiece(int32_t id, bool render_special) const {
  std::string out;
  AppendPiece(id, render_special, /*strip_space=*/false, &out);
  return out;
}

// As llama.cpp's llama_detokenize: optional removal of the BOS/EOS the vocab adds, and removal of
// the first token's leading space when the vocab adds a space prefix (unless a BOS was removed).
std::string SpmTokenizer::Decode(std::span<const int32_t> ids, DecodeOptions options) const {
  bool strip_space = vocab_.add_space_prefix();
  if (options.remove_special && vocab_.add_bos() && !ids.empty() && ids.front() == vocab_.bos()) {
    strip_space = false;
    ids = ids.subspan(1);
  }
  if (options.remove_special && vocab_.add_eos() && !ids.empty() && ids.back() == vocab_.eos()) {
    ids = ids.first(ids.size() - 1);
  }
  std::string out;
  for (int32_t id : ids) {
    AppendPiece(id, options.render_special, strip_space, &out);
    strip_space = false;
  }
  return out;
}

std::string StreamDecoder::Push(int32_t id) {
  pending_ += piece_(id, render_special_);
  // Hold back a trailing lead byte (and its continuation bytes) whose character is not complete.
  size_t keep = 0;
  for (size_t back = 1; back <= std::min<size_t>(3, pending_.size()); ++back) {
    const uint8_t b = static_cast<uint8_t>(pending_[pending_.size() - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: look further back
    size_t need = 1;
    if ((b & 0xE0) == 0xC0) need = 2;
    else if ((b & 0xF0) == 0xE0) need = 3;
    else if ((b & 0xF8) == 0xF0) need = 4;
    if (need > back) keep = back;
    break;
  }
  std::string ready = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return ready;
}

std::string StreamDecoder::Finish() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

}  // namespace uniprefill::tokenizer
