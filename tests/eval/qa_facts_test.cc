// The facts of the long-document QA family: deterministic, every template used, and each fact's
// parts consistent (the statement is the answer prefix completed by the answer, which the
// question does not give away and the scorer accepts).
#include "eval/qa_facts.h"

#include <gtest/gtest.h>

#include <set>

#include "eval/qa_scoring.h"

namespace uniprefill::eval {
namespace {

TEST(QaFacts, SameSeedSameFactOtherSeedsDiffer) {
  const QaFact a = MakeQaFact(7), b = MakeQaFact(7);
  EXPECT_EQ(a.statement, b.statement);
  EXPECT_EQ(a.answer, b.answer);
  std::set<std::string> statements;
  for (uint64_t seed = 0; seed < 50; ++seed) statements.insert(MakeQaFact(seed).statement);
  EXPECT_GT(statements.size(), 45u);
}

TEST(QaFacts, EveryTemplateIsDrawn) {
  std::set<std::string> kinds;
  for (uint64_t seed = 0; seed < 200; ++seed) kinds.insert(MakeQaFact(seed).kind);
  EXPECT_EQ(kinds, std::set<std::string>(QaFactKinds().begin(), QaFactKinds().end()));
}

TEST(QaFacts, StatementIsThePrefixCompletedByTheAnswer) {
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const QaFact f = MakeQaFact(seed);
    SCOPED_TRACE(f.statement);
    EXPECT_EQ(f.statement, f.answer_prefix + " " + f.answer + ".");
    EXPECT_EQ(f.answer.find_first_of(".?!\n"), std::string::npos);
    EXPECT_EQ(f.question.find(f.answer), std::string::npos);
    EXPECT_EQ(f.question.back(), '?');
    // What a model that completes the prefix correctly writes scores as a match.
    EXPECT_TRUE(QaExactMatch(" " + f.answer + ".", f.answer));
  }
}

}  // namespace
}  // namespace uniprefill::eval
