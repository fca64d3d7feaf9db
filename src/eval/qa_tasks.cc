// Long-document QA samples fitted to a token target (see qa_tasks.h).
#include "eval/qa_tasks.h"

#include <random>

#include "eval/qa_haystack.h"

namespace uniprefill::eval {
namespace {

constexpr const char* kInstruction =
    "Read the document below and answer the question that follows it.\n\nDocument:\n";

struct Built {
  QaSample sample;
  int tokens = 0;  // prompt tokens + kQaMaxNewTokens
};

Built Build(const std::vector<CorpusPiece>& pieces, size_t start, size_t count, const QaFact& fact,
            double depth, const PromptTokenCounter& counter) {
  const QaDocument doc = BuildQaDocument(pieces, start, count, fact.statement, depth);
  Built b;
  QaSample& s = b.sample;
  s.fact = fact;
  s.input = QaInput(doc.text, fact);
  s.answer_prefix = fact.answer_prefix;
  s.depth_asked = depth;
  s.depth = doc.depth;
  s.document_begin = std::string_view(kInstruction).size();
  s.document_end = s.document_begin + doc.text.size();
  s.fact_offset = s.document_begin + doc.fact_offset;
  s.first_piece = start;
  s.pieces = count;
  s.prompt_tokens = counter(s.input, s.answer_prefix);
  b.tokens = s.prompt_tokens + kQaMaxNewTokens;
  return b;
}

}  // namespace

std::string QaInput(const std::string& document, const QaFact& fact) {
  return kInstruction + document + "\n\nQuestion: " + fact.question + " Answer in a few words.";
}

Result<QaSample> MakeQaSample(const std::vector<CorpusPiece>& pieces, int target_tokens,
                              double depth, uint64_t seed, const PromptTokenCounter& count) {
  if (pieces.empty()) return InvalidArgument("the QA corpus holds no text");
  std::mt19937_64 rng(seed);
  const QaFact fact = MakeQaFact(rng());
  const size_t start = SentenceStartAtOrAfter(pieces, rng() % pieces.size());
  auto build = [&](size_t n) {
    Built b = Build(pieces, start, n, fact, depth, count);
    b.sample.target_tokens = target_tokens;
    return b;
  };
  Built best = build(1);
  if (best.tokens > target_tokens) {
    return InvalidArgument("length " + std::to_string(target_tokens) +
                           " is too short for a QA sample: it needs at least " +
                           std::to_string(best.tokens) + " tokens (prompt + " +
                           std::to_string(kQaMaxNewTokens) + " generated)");
  }
  // Gallop up from one piece, then bisect: the probes stay near the answer, so each costs about
  // one tokenization of the target length.
  size_t lo = 1, hi = 2;
  for (;;) {
    if (hi >= pieces.size()) {
      hi = pieces.size();
      Built all = build(hi);
      if (all.tokens <= target_tokens) {
        if (all.tokens < target_tokens * 0.9) {
          return InvalidArgument("the QA corpus is too short for length " +
                                 std::to_string(target_tokens) + ": all of it makes a prompt of " +
                                 std::to_string(all.sample.prompt_tokens) + " tokens");
        }
        return std::move(all.sample);
      }
      break;
    }
    Built b = build(hi);
    if (b.tokens > target_tokens) break;
    lo = hi;
    best = std::move(b);
    hi *= 2;
  }
  while (hi - lo > 1) {  // build(lo) fits, build(hi) does not
    const size_t mid = lo + (hi - lo) / 2;
    Built b = build(mid);
    if (b.tokens <= target_tokens) {
      lo = mid;
      best = std::move(b);
    } else {
      hi = mid;
    }
  }
  return std::move(best.sample);
}

}  // namespace uniprefill::eval
