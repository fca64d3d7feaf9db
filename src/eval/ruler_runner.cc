#include "eval/ruler_runner.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>

#include "eval/ruler_scoring.h"
#include "uniprefill/batch_engine.h"

namespace uniprefill::eval {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

SamplingParams CaseSampling(const RulerCase& c, bool uniprefill,
                            const std::optional<UniPrefillOptions>& options) {
  SamplingParams sp;
  sp.max_tokens = c.sample.max_new_tokens;
  sp.temperature = 0;
  sp.stop_at_end_of_turn = true;
  sp.uniprefill = uniprefill;
  if (uniprefill) sp.uniprefill_options = options;
  return sp;
}

// Every (setting, case) through one BatchEngine: all submitted at once (the scheduler admits up to
// run.batch), dense and each setting of a case next to each other in the queue.
Result<std::vector<std::vector<RulerOutcome>>> RunBatched(
    Engine& engine, const std::vector<RulerCase>& cases, const std::vector<RulerSetting>& settings,
    const RulerRunOptions& run, RulerRunReport* report,
    const std::function<void(int64_t, int64_t)>& progress) {
  size_t longest = 0;
  for (const RulerCase& c : cases) longest = std::max(longest, c.ids.size());
  ServingOptions so;
  so.kv_cache_memory = run.kv_cache_memory;
  so.max_num_seqs = run.batch;
  // Whole prefills, as Engine::Generate runs them (segment-wise chunks select the same tokens,
  // but whole is what the sequential path and the CPU results measured).
  so.chunked_prefill = false;
  so.max_batched_tokens = std::max<int>(8192, static_cast<int>(longest) + 1);
  std::vector<std::vector<RulerOutcome>> out(settings.size(),
                                             std::vector<RulerOutcome>(cases.size()));
  std::mutex mu;
  std::condition_variable cv;
  int64_t done = 0;
  std::string error;
  const int64_t total = static_cast<int64_t>(cases.size() * settings.size());
  // Declared after what its callbacks touch: destroyed (aborting what is left) before them.
  UP_ASSIGN_OR_RETURN(std::unique_ptr<BatchEngine> batch, BatchEngine::Start(engine, so));
  for (size_t i = 0; i < cases.size(); ++i) {
    for (size_t s = 0; s < settings.size(); ++s) {
      RulerOutcome* o = &out[s][i];
      const RulerCase* c = &cases[i];
      // Callbacks run on the engine thread, one at a time: each touches only its own outcome
      // until the final update, which is counted under the lock.
      auto submitted = batch->Submit(
          c->ids, CaseSampling(*c, settings[s].uniprefill, settings[s].options),
          [o, c, &mu, &cv, &done, &error](const RequestUpdate& u) {
            o->prediction += u.text;
            if (!u.finished) return;
            o->score = ScoreRulerPrediction(c->sample, o->prediction);
            o->prefill_s = 0;
            o->kept = u.usage.kept;
            o->keep_ratio = KeepRatio(u.usage.kept);
            std::lock_guard<std::mutex> lock(mu);
            if ((u.finish_reason == "error" || u.finish_reason == "abort") && error.empty()) {
              error = "a batched request ended with " + u.finish_reason +
                      (u.error.empty() ? "" : ": " + u.error);
            }
            ++done;
            cv.notify_all();
          });
      if (!submitted.ok()) return submitted.status();
    }
  }
  std::unique_lock<std::mutex> lock(mu);
  while (done < total) {
    cv.wait_for(lock, std::chrono::seconds(2));
    if (progress) {
      const int64_t now = done;
      lock.unlock();
      progress(now, total);
      lock.lock();
    }
  }
  if (!error.empty()) return Internal(error);
  if (report) report->preemptions = batch->Metrics().preemptions;
  return out;
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
  UP_ASSIGN_OR_RETURN(GenerationResult r,
                      engine.Generate(c.ids, CaseSampling(c, uniprefill, options)));
  RulerOutcome out;
  out.prediction = r.text;
  out.score = ScoreRulerPrediction(c.sample, r.text);
  out.prefill_s = r.stats.ttft_s;
  out.kept = r.kept;
  out.keep_ratio = KeepRatio(r.kept);
  return out;
}

Result<std::vector<std::vector<RulerOutcome>>> RunRulerSettings(
    Engine& engine, const std::vector<RulerCase>& cases, const std::vector<RulerSetting>& settings,
    const RulerRunOptions& run, RulerRunReport* report,
    const std::function<void(int64_t, int64_t)>& progress) {
  if (run.batch > 1) return RunBatched(engine, cases, settings, run, report, progress);
  std::vector<std::vector<RulerOutcome>> out(settings.size());
  const int64_t total = static_cast<int64_t>(cases.size() * settings.size());
  int64_t done = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    for (size_t s = 0; s < settings.size(); ++s) {
      UP_ASSIGN_OR_RETURN(RulerOutcome r, RunRulerCase(engine, cases[i], settings[s].uniprefill,
                                                       settings[s].options));
      out[s].push_back(std::move(r));
      if (progress) progress(++done, total);
    }
  }
  if (report) report->preemptions = 0;
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
