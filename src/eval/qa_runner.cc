// Dense vs UniPrefill runs of long-document QA samples (see qa_runner.h).
#include "eval/qa_runner.h"

#include <map>

#include "eval/qa_scoring.h"

namespace uniprefill::eval {

Result<std::vector<QaCase>> BuildQaCases(const Engine& engine,
                                         const std::vector<CorpusPiece>& pieces,
                                         const std::vector<int>& lengths,
                                         const std::vector<double>& depths, int samples,
                                         uint64_t seed, ChatMode chat,
                                         const std::function<void()>& on_case) {
  if (!engine.can_tokenize()) {
    return InvalidArgument("the QA harness needs a model with a tokenizer");
  }
  if (depths.empty()) return InvalidArgument("no depths to place facts at");
  const bool use_chat =
      chat == ChatMode::kAuto ? engine.has_chat_template() : chat == ChatMode::kOn;
  if (use_chat && !engine.has_chat_template()) {
    return InvalidArgument("--chat on: the engine has no chat template for " + engine.model_name() +
                           "; use --chat off");
  }
  // The same rendering as the RULER harness: the user turn, then the answer's opening.
  auto render = [&](const std::string& input, const std::string& answer_prefix) {
    std::string text = use_chat ? engine.FormatChat({{"user", input}}) : input + "\n";
    return text + answer_prefix;
  };
  PromptTokenCounter count = [&](const std::string& input, const std::string& answer_prefix) {
    return static_cast<int>(engine.Tokenize(render(input, answer_prefix), true).size());
  };
  std::vector<QaCase> cases;
  for (int length : lengths) {
    if (length > engine.context_size()) {
      return InvalidArgument("length " + std::to_string(length) + " exceeds the context of " +
                             std::to_string(engine.context_size()) + " tokens of " +
                             engine.model_name());
    }
    for (int s = 0; s < samples; ++s) {
      QaCase c;
      const double depth = depths[static_cast<size_t>(s) % depths.size()];
      UP_ASSIGN_OR_RETURN(
          c.sample, MakeQaSample(pieces, length, depth, RulerSampleSeed(seed, "qa", length, s),
                                 count));
      c.ids = engine.Tokenize(render(c.sample.input, c.sample.answer_prefix), true);
      c.sample_index = s;
      cases.push_back(std::move(c));
      if (on_case) on_case();
    }
  }
  return cases;
}

Result<QaOutcome> RunQaCase(Engine& engine, const QaCase& c, bool uniprefill) {
  SamplingParams sp;
  sp.max_tokens = kQaMaxNewTokens;
  sp.temperature = 0;
  sp.stop_at_end_of_turn = true;
  sp.stop = {"\n"};  // the answer is one line (ExtractAnswer); saves decoding a second one
  sp.uniprefill = uniprefill;
  UP_ASSIGN_OR_RETURN(GenerationResult r, engine.Generate(c.ids, sp));
  QaOutcome out;
  out.prediction = r.text;
  out.exact = QaExactMatch(r.text, c.sample.fact.answer);
  out.contains = QaContainsAnswer(r.text, c.sample.fact.answer);
  out.prefill_s = r.stats.ttft_s;
  out.kept = r.kept;
  out.keep_ratio = KeepRatio(r.kept);
  return out;
}

std::vector<QaCell> AggregateQa(const std::vector<QaCase>& cases,
                                const std::vector<QaOutcome>& outcomes, bool by_depth) {
  std::vector<QaCell> cells;
  std::map<std::pair<int, double>, size_t> index;
  for (size_t i = 0; i < cases.size() && i < outcomes.size(); ++i) {
    const double depth = by_depth ? cases[i].sample.depth_asked : -1;
    const auto key = std::make_pair(cases[i].sample.target_tokens, depth);
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, cells.size()).first;
      cells.push_back({key.first, key.second, 0, 0, 0, 0, 0});
    }
    QaCell& cell = cells[it->second];
    cell.samples += 1;
    cell.exact_match += outcomes[i].exact ? 100 : 0;
    cell.contains += outcomes[i].contains ? 100 : 0;
    cell.prefill_s += outcomes[i].prefill_s;
    cell.keep_ratio += outcomes[i].keep_ratio;
  }
  for (QaCell& cell : cells) {
    cell.exact_match /= cell.samples;
    cell.contains /= cell.samples;
    cell.prefill_s /= cell.samples;
    cell.keep_ratio /= cell.samples;
  }
  return cells;
}

}  // namespace uniprefill::eval
