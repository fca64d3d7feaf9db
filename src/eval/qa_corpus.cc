// Corpora of the long-document QA family (see qa_corpus.h).
#include "eval/qa_corpus.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace uniprefill::eval {
namespace {

// The order of scripts/make_license_corpus.sh, so `eval qa` and the prefill benchmarks read the
// same text.
constexpr const char* kLicenseFiles[] = {"GPL-3",   "GPL-2",   "LGPL-2.1", "LGPL-2",     "MPL-1.1",
                                         "GFDL-1.3", "GFDL-1.2", "MPL-2.0",  "GPL-1",  "Apache-2.0",
                                         "LGPL-3",  "CC0-1.0", "Artistic", "BSD"};

bool ReadFile(const std::filesystem::path& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

bool IsBlank(std::string_view line) {
  return std::all_of(line.begin(), line.end(),
                     [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
}

// A word after which a sentence ends: it ends in '.', '?' or '!' (before any closing quotes or
// brackets) and is not a list marker such as "0.", "12." or "a.".
bool EndsSentence(std::string_view word) {
  size_t end = word.size();
  while (end > 0 && std::string_view("\"')]").find(word[end - 1]) != std::string_view::npos) --end;
  if (end == 0 || std::string_view(".?!").find(word[end - 1]) == std::string_view::npos) {
    return false;
  }
  const std::string_view stem = word.substr(0, end - 1);
  const bool number = !stem.empty() && std::all_of(stem.begin(), stem.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
  const bool letter = stem.size() == 1 && std::isalpha(static_cast<unsigned char>(stem[0]));
  return !number && !letter;
}

bool EndsClause(std::string_view word) {
  return !word.empty() && std::string_view(",;:").find(word.back()) != std::string_view::npos;
}

// Appends the pieces of one paragraph (its words) to `out`.
void SplitParagraph(const std::vector<std::string>& words, std::vector<CorpusPiece>* out) {
  CorpusPiece piece;
  int count = 0;
  auto flush = [&](bool boundary) {
    piece.boundary_after = boundary;
    out->push_back(std::move(piece));
    piece = CorpusPiece{};
    count = 0;
  };
  for (const std::string& w : words) {
    if (!piece.text.empty()) piece.text += ' ';
    piece.text += w;
    ++count;
    if (EndsSentence(w)) {
      flush(true);
    } else if (count >= kMaxPieceWords || (count >= 12 && EndsClause(w))) {
      flush(false);
    }
  }
  if (!piece.text.empty()) flush(true);
  if (!out->empty()) {
    out->back().paragraph_end = true;
    out->back().boundary_after = true;
  }
}

}  // namespace

std::string StripMarkdownCode(std::string_view markdown) {
  std::string out;
  std::istringstream in{std::string(markdown)};
  bool fenced = false, comment = false, previous_blank = true;
  for (std::string line; std::getline(in, line);) {
    const size_t first = line.find_first_not_of(" \t");
    const std::string_view body =
        first == std::string::npos ? std::string_view() : std::string_view(line).substr(first);
    if (body.rfind("```", 0) == 0 || body.rfind("~~~", 0) == 0) {
      fenced = !fenced;
      continue;
    }
    if (!comment && body.rfind("<!--", 0) == 0) comment = true;
    const bool drop = fenced || comment || body.rfind("|", 0) == 0 ||
                      (previous_blank && line.rfind("    ", 0) == 0 && !body.empty());
    if (comment && line.find("-->") != std::string::npos) comment = false;
    if (drop) continue;  // an indented block stays dropped while its lines stay indented
    previous_blank = IsBlank(line);
    out += line;
    out += '\n';
  }
  return out;
}

Result<std::string> LoadQaCorpus(std::string_view corpus, const QaCorpusPaths& paths) {
  namespace fs = std::filesystem;
  std::string text;
  if (corpus == "licenses") {
    for (const char* name : kLicenseFiles) {
      std::string one;
      if (ReadFile(fs::path(paths.licenses_dir) / name, &one)) text += one + "\n";
    }
    if (text.empty()) {
      return NotFound("--corpus licenses: no license texts in " + paths.licenses_dir +
                      " (Debian's base-files ships them); give --corpus docs or a text file");
    }
    return text;
  }
  if (corpus == "docs") {
    std::vector<fs::path> files;
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(paths.docs_dir, ec)) {
      if (e.path().extension() == ".md") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      std::string one;
      if (ReadFile(f, &one)) text += StripMarkdownCode(one) + "\n";
    }
    if (text.empty()) {
      return NotFound("--corpus docs: no Markdown files in '" + paths.docs_dir + "'");
    }
    return text;
  }
  if (!ReadFile(fs::path(corpus), &text) || text.empty()) {
    return NotFound("--corpus '" + std::string(corpus) +
                    "' is neither 'licenses', 'docs' nor a readable, non-empty text file");
  }
  return text;
}

std::vector<CorpusPiece> SplitCorpus(std::string_view text) {
  std::vector<CorpusPiece> pieces;
  std::vector<std::string> words;
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) {
    if (IsBlank(line)) {
      SplitParagraph(words, &pieces);
      words.clear();
      continue;
    }
    std::istringstream ws(line);
    for (std::string w; ws >> w;) words.push_back(std::move(w));
  }
  SplitParagraph(words, &pieces);
  return pieces;
}

}  // namespace uniprefill::eval
