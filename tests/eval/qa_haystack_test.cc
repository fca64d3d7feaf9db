// The corpus and documents of the long-document QA family: how text is cut into pieces, the named
// corpora, and documents holding one fact exactly once, between sentences, at the depth asked.
#include "eval/qa_haystack.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "eval/qa_corpus.h"
#include "testing/tiny_gemma3.h"

namespace uniprefill::eval {
namespace {

constexpr const char* kFact = "The code name of the Oslo project is Bluefinch.";

size_t Occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

int Words(const std::string& text) {
  std::istringstream in(text);
  int n = 0;
  for (std::string w; in >> w;) ++n;
  return n;
}

// Forty short paragraphs of three sentences each, numbered so that every sentence is distinct.
std::string Prose() {
  std::string text;
  for (int p = 0; p < 40; ++p) {
    for (int s = 0; s < 3; ++s) {
      text += "Paragraph " + std::to_string(p) + " says thing " + std::to_string(s) +
              " about\nthe river and the hills. ";
    }
    text += "\n\n";
  }
  return text;
}

TEST(QaCorpus, SplitsAtSentenceAndParagraphEndsAndCollapsesWhitespace) {
  const std::vector<CorpusPiece> p =
      SplitCorpus("First one.  Second\n  line two?\n\n0. Definitions. Third \"quoted.\"\n");
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].text, "First one.");
  EXPECT_EQ(p[1].text, "Second line two?");
  EXPECT_TRUE(p[1].paragraph_end);
  EXPECT_FALSE(p[0].paragraph_end);
  EXPECT_EQ(p[2].text, "0. Definitions.");  // a list number does not end a sentence
  EXPECT_EQ(p[3].text, "Third \"quoted.\"");
  for (const CorpusPiece& c : p) EXPECT_TRUE(c.boundary_after) << c.text;
}

TEST(QaCorpus, LongSentencesAreCutAtClausesOrWordCountsWithoutABoundary) {
  std::string sentence;
  for (int i = 0; i < 70; ++i) sentence += "word" + std::to_string(i) + (i == 14 ? ", " : " ");
  const std::vector<CorpusPiece> p = SplitCorpus(sentence + "end.");
  ASSERT_GE(p.size(), 3u);
  EXPECT_EQ(Words(p[0].text), 15);  // cut after the comma, past 12 words
  for (size_t i = 0; i + 1 < p.size(); ++i) {
    EXPECT_LE(Words(p[i].text), kMaxPieceWords);
    EXPECT_FALSE(p[i].boundary_after) << i;
  }
  EXPECT_TRUE(p.back().boundary_after);
  std::string joined;
  for (const CorpusPiece& c : p) joined += (joined.empty() ? "" : " ") + c.text;
  EXPECT_EQ(joined, sentence + "end.");
}

TEST(QaCorpus, MarkdownLosesCodeAndTablesButKeepsProse) {
  const std::string md =
      "# Title\n\nSome prose here.\n\n```\ncode();\n```\n\n| a | b |\n|---|---|\n\n"
      "    indented code\n\nMore prose.\n";
  const std::string out = StripMarkdownCode(md);
  EXPECT_NE(out.find("Some prose here."), std::string::npos);
  EXPECT_NE(out.find("More prose."), std::string::npos);
  EXPECT_NE(out.find("# Title"), std::string::npos);
  EXPECT_EQ(out.find("code()"), std::string::npos);
  EXPECT_EQ(out.find("| a |"), std::string::npos);
  EXPECT_EQ(out.find("indented code"), std::string::npos);
}

TEST(QaCorpus, LoadsAFileTheDocsAndNamesWhatIsMissing) {
  const std::string path = testing::TempPath("qa_corpus.txt");
  std::ofstream(path) << "Hello there. Bye.\n";
  Result<std::string> file = LoadQaCorpus(path, {});
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(*file, "Hello there. Bye.\n");

  QaCorpusPaths paths;
  paths.docs_dir = std::string(UP_SOURCE_DIR) + "/docs";
  Result<std::string> docs = LoadQaCorpus("docs", paths);
  ASSERT_TRUE(docs.ok()) << docs.status().message();
  EXPECT_GT(docs->size(), 10000u);
  EXPECT_EQ(docs->find("```"), std::string::npos);

  Result<std::string> missing = LoadQaCorpus("/nonexistent/corpus.txt", {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/corpus.txt"), std::string::npos);
  paths.licenses_dir = "/nonexistent";
  Result<std::string> no_licenses = LoadQaCorpus("licenses", paths);
  ASSERT_FALSE(no_licenses.ok());
  EXPECT_NE(no_licenses.status().message().find("/nonexistent"), std::string::npos);
}

TEST(QaHaystack, TheFactAppearsOnceBetweenSentencesAtTheDepthAsked) {
  const std::vector<CorpusPiece> pieces = SplitCorpus(Prose());
  for (double depth : {0.0, 0.1, 0.25, 0.5, 0.77, 0.9, 1.0}) {
    SCOPED_TRACE(depth);
    const QaDocument doc = BuildQaDocument(pieces, 6, 60, kFact, depth);
    EXPECT_EQ(Occurrences(doc.text, kFact), 1u);
    EXPECT_EQ(doc.text.compare(doc.fact_offset, std::string(kFact).size(), kFact), 0);
    // Between sentences: at the start, or after a sentence's ". " or a paragraph's blank line.
    const std::string before = doc.text.substr(0, doc.fact_offset);
    EXPECT_TRUE(before.empty() || before.ends_with(". ") || before.ends_with(".\n\n")) << before;
    // One piece holds ~50 bytes of ~3,000: boundaries lie within 2% of any depth.
    EXPECT_NEAR(doc.depth, depth, 0.02);
    const double measured =
        static_cast<double>(doc.fact_offset) / (doc.text.size() - std::string(kFact).size() - 1);
    EXPECT_NEAR(measured, depth, 0.03);
  }
  EXPECT_EQ(BuildQaDocument(pieces, 6, 60, kFact, 0.0).fact_offset, 0u);
  EXPECT_TRUE(BuildQaDocument(pieces, 6, 60, kFact, 1.0).text.ends_with(kFact));
}

TEST(QaHaystack, WithoutTheFactTheDocumentIsTheCorpusText) {
  const std::vector<CorpusPiece> pieces = SplitCorpus(Prose());
  const QaDocument doc = BuildQaDocument(pieces, 0, 12, kFact, 0.5);
  std::string text = doc.text;
  text.erase(doc.fact_offset, std::string(kFact).size() + 1);
  // The first four paragraphs of Prose(), whitespace collapsed, paragraphs kept.
  std::string want;
  for (int p = 0; p < 4; ++p) {
    for (int s = 0; s < 3; ++s) {
      want += "Paragraph " + std::to_string(p) + " says thing " + std::to_string(s) +
              " about the river and the hills.";
      want += s < 2 ? " " : (p < 3 ? "\n\n" : "");
    }
  }
  EXPECT_EQ(text, want);
}

TEST(QaHaystack, FactsNeverSplitASentenceAndIndicesWrapAroundTheCorpus) {
  std::string long_sentences;
  for (int s = 0; s < 20; ++s) {
    for (int w = 0; w < 60; ++w) {
      long_sentences += std::to_string(s) + "x" + std::to_string(w) + " ";
    }
    long_sentences += "stop. ";
  }
  const std::vector<CorpusPiece> pieces = SplitCorpus(long_sentences);
  for (double depth = 0; depth <= 1.0; depth += 0.05) {
    const QaDocument doc = BuildQaDocument(pieces, pieces.size() - 4, 20, kFact, depth);
    const std::string before = doc.text.substr(0, doc.fact_offset);
    EXPECT_TRUE(before.empty() || before.ends_with("stop. ") || before.ends_with("stop.\n\n"))
        << depth << ": " << before.substr(before.size() > 40 ? before.size() - 40 : 0);
  }
  EXPECT_EQ(SentenceStartAtOrAfter(pieces, 1), 3u);  // 60-word sentences: 3 pieces each
  EXPECT_EQ(SentenceStartAtOrAfter(pieces, pieces.size() - 1), 0u);
}

}  // namespace
}  // namespace uniprefill::eval
