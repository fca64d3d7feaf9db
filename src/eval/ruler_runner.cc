#include "eval/ruler_runner.h"

#include <map>

#include "eval/ruler_scoring.h"

namespace uniprefill::eval {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool UseChat(const Engine& engine, ChatMode chat) {
  if (chat == ChatMode::kAuto) return engine.has_chat_template();
  return chat == ChatMode::kOn;
}

}  // namespace

uint64_t RulerSampleSeed(uint64_t seed, std::string_view task, int length, int index) {
  uint64_t h = SplitMix64(seed);
  for (char c : task) h = SplitMix64(h ^ static_cast<unsigned char>(c));
  h = SplitMix64(h ^ static_cast<uint64_t>(length));
  return SplitMix64(h ^ static_cast<uint64_t>(index));
}

Result<std::vector<RulerCase>> BuildRulerCases(const Engine& engine,
                                               const std::vector<std::string>& tasks,
                                               const std::vector<int>& lengths, int samples,
                                               uint64_t seed, ChatMode chat,
                                               const std::function<void()>& on_case) {
  if (!engine.can_tokenize()) {
    return InvalidArgument("the RULER harness needs a model with a tokenizer");
  }
  const bool use_chat = UseChat(engine, chat);
  if (use_chat && !engine.has_chat_template()) {
    return InvalidArgument("--chat on: the engine has no chat template for " + engine.model_name() +
                           "; use --chat off");
  }
  auto render = [&](const std::string& input, const std::string& answer_prefix) {
    std::string text = use_chat ? engine.FormatChat({{"user", input}}) : input + "\n";
    return text + answer_prefix;
  };
  PromptTokenCounter count = [&](const std::string& input, const std::string& answer_prefix) {
    return static_cast<int>(engine.Tokenize(render(input, answer_prefix), true).size());
  };
  std::vector<RulerCase> cases;
  for (const std::string& task : tasks) {
    UP_ASSIGN_OR_RETURN(const RulerTaskInfo* info, FindRulerTask(task));
    for (int length : lengths) {
      if (length > engine.context_size()) {
        return InvalidArgument("length " + std::to_string(length) + " exceeds the context of " +
                               std::to_string(engine.context_size()) + " tokens");
      }
      for (int s = 0; s < samples; ++s) {
        RulerCase c;
        UP_ASSIGN_OR_RETURN(
            c.sample,
            MakeRulerSample(info->name, length, RulerSampleSeed(seed, task, length, s), count));
        c.ids = engine.Tokenize(render(c.sample.input, c.sample.answer_prefix), true);
        c.sample_index = s;
        cases.push_back(std::move(c));
        if (on_case) on_case();
      }
    }
  }
  return cases;
}

Result<RulerOutcome> RunRulerCase(Engine& engine, const RulerCase& c, bool uniprefill,
                                  const std::optional<UniPrefillOptions>& options) {
  SamplingParams sp;
  sp.max_tokens = c.sample.max_new_tokens;
  sp.temperature = 0;
  sp.stop_at_end_of_turn = true;
  sp.uniprefill = uniprefill;
  if (uniprefill) sp.uniprefill_options = options;
  UP_ASSIGN_OR_RETURN(GenerationResult r, engine.Generate(c.ids, sp));
  RulerOutcome out;
  out.prediction = r.text;
  out.score = ScoreRulerPrediction(c.sample, r.text);
  out.prefill_s = r.stats.ttft_s;
  out.kept = r.kept;
  out.keep_ratio = KeepRatio(r.kept);
  return out;
}

std::vector<RulerCell> AggregateRuler(const std::vector<RulerCase>& cases,
                                      const std::vector<RulerOutcome>& outcomes) {
  std::vector<RulerCell> cells;
  std::map<std::pair<std::string, int>, size_t> index;
  for (size_t i = 0; i < cases.size() && i < outcomes.size(); ++i) {
    const auto key = std::make_pair(cases[i].sample.task, cases[i].sample.target_tokens);
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, cells.size()).first;
      cells.push_back({key.first, key.second, 0, 0, 0, 0});
    }
    RulerCell& cell = cells[it->second];
    cell.samples += 1;
    cell.accuracy += outcomes[i].score;
    cell.prefill_s += outcomes[i].prefill_s;
    cell.keep_ratio += outcomes[i].keep_ratio;
  }
  for (RulerCell& cell : cells) {
    cell.accuracy /= cell.samples;
    cell.prefill_s /= cell.samples;
    cell.keep_ratio /= cell.samples;
  }
  return cells;
}

}  // namespace uniprefill::eval
