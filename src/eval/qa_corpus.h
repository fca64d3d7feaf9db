// The natural-text corpora of the long-document QA family (`uniprefill eval qa`): where their text
// comes from, and how it is cut into pieces that a haystack is assembled from.
//
// Goals: real English prose (license texts, the repository's own documentation) instead of
// generated filler; a deterministic piece list for a given text; pieces small enough (at most
// kMaxPieceWords words) that a haystack can be fitted to a token target within a few percent;
// and a marker on each piece saying whether a sentence may be inserted after it without cutting a
// sentence in two.
// Non-goals: linguistically exact sentence splitting (abbreviations such as "e.g." may end a
// piece); keeping Markdown code, tables or line wrapping (whitespace inside a paragraph collapses
// to single spaces, paragraphs stay separated by a blank line).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace uniprefill::eval {

// Where the named corpora live. The command passes the source tree's docs/ folder; tests may
// point both at their own files.
struct QaCorpusPaths {
  std::string licenses_dir = "/usr/share/common-licenses";
  std::string docs_dir;
};

// The text of `corpus`: "licenses" (the license texts scripts/make_license_corpus.sh concatenates,
// read from licenses_dir in the same order; missing ones are skipped), "docs" (docs_dir/*.md in
// name order, with Markdown code blocks and tables removed), or otherwise a path to a text file.
// NotFound naming what is missing when nothing can be read.
Result<std::string> LoadQaCorpus(std::string_view corpus, const QaCorpusPaths& paths);

// Markdown without fenced or indented code blocks, table rows and HTML comments; the prose and
// headings stay, paragraph breaks too.
std::string StripMarkdownCode(std::string_view markdown);

inline constexpr int kMaxPieceWords = 24;

struct CorpusPiece {
  std::string text;            // words joined by single spaces
  bool boundary_after = true;  // a sentence or paragraph ends here: a fact may follow
  bool paragraph_end = false;  // a blank line follows in the source
};

// Cuts text into pieces: at sentence ends ('.', '?' or '!' ending a word, optionally followed by
// a closing quote or bracket, except after a bare number or single letter such as "0." or "a."),
// at paragraph ends (blank lines), and inside sentences longer than kMaxPieceWords words (after a
// ',', ';' or ':' once the piece has 12 words, else at kMaxPieceWords words; those pieces have
// boundary_after false). The last piece ends a paragraph.
std::vector<CorpusPiece> SplitCorpus(std::string_view text);

}  // namespace uniprefill::eval
