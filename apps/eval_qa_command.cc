#include "eval_qa_command.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "eval/qa_corpus.h"
#include "eval/qa_runner.h"
#include "eval_ruler_command.h"
#include "model_names.h"
#include "output_files.h"
#include "progress_bar.h"
#include "sparsity/uniprefill_config.h"

namespace uniprefill::cli {
namespace {

// One (length, depth) or one length, with both settings.
struct QaPair {
  eval::QaCell dense, uniprefill;
  double speedup() const {
    return uniprefill.prefill_s > 0 ? dense.prefill_s / uniprefill.prefill_s : 0;
  }
};

std::vector<QaPair> Pairs(const std::vector<eval::QaCase>& cases,
                          const std::vector<eval::QaOutcome>& dense,
                          const std::vector<eval::QaOutcome>& up, bool by_depth) {
  const std::vector<eval::QaCell> d = eval::AggregateQa(cases, dense, by_depth);
  const std::vector<eval::QaCell> u = eval::AggregateQa(cases, up, by_depth);
  std::vector<QaPair> pairs;
  for (size_t i = 0; i < d.size(); ++i) pairs.push_back({d[i], u[i]});
  return pairs;
}

void PrintRow(const QaPair& p) {
  char depth[16] = "all";
  if (p.dense.depth >= 0) std::snprintf(depth, sizeof depth, "%.2f", p.dense.depth);
  std::printf("%7s %6s %7d %9.1f %9.1f %+7.1f %10.1f %10.1f %6.3f %9.2f %9.2f %7.2fx\n",
              LengthLabel(p.dense.length).c_str(), depth, p.dense.samples, p.dense.exact_match,
              p.uniprefill.exact_match, p.uniprefill.exact_match - p.dense.exact_match,
              p.dense.contains, p.uniprefill.contains, p.uniprefill.keep_ratio,
              p.dense.prefill_s, p.uniprefill.prefill_s, p.speedup());
}

nlohmann::json PairJson(const QaPair& p) {
  nlohmann::json j = {
      {"length", p.dense.length},
      {"samples", p.dense.samples},
      {"dense",
       {{"exact_match", p.dense.exact_match},
        {"contains", p.dense.contains},
        {"prefill_s", p.dense.prefill_s}}},
      {"uniprefill",
       {{"exact_match", p.uniprefill.exact_match},
        {"contains", p.uniprefill.contains},
        {"prefill_s", p.uniprefill.prefill_s},
        {"keep_ratio", p.uniprefill.keep_ratio}}},
      {"prefill_speedup", p.speedup()}};
  if (p.dense.depth >= 0) j["depth"] = p.dense.depth;
  return j;
}

nlohmann::json OutcomeJson(const eval::QaOutcome& o, bool with_kept) {
  nlohmann::json j = {{"exact_match", o.exact},
                      {"contains", o.contains},
                      {"prefill_s", o.prefill_s},
                      {"prediction", o.prediction}};
  if (with_kept) {
    nlohmann::json kept = nlohmann::json::array();
    for (const KeptTokensInfo& k : o.kept) {
      kept.push_back({{"layer", k.layer}, {"kept", k.kept}, {"alive", k.alive}});
    }
    j["keep_ratio"] = o.keep_ratio;
    j["kept"] = kept;
  }
  return j;
}

nlohmann::json SamplesJson(const std::vector<eval::QaCase>& cases,
                           const std::vector<eval::QaOutcome>& dense,
                           const std::vector<eval::QaOutcome>& up) {
  nlohmann::json samples = nlohmann::json::array();
  for (size_t i = 0; i < cases.size(); ++i) {
    const eval::QaSample& s = cases[i].sample;
    samples.push_back({{"length", s.target_tokens},
                       {"index", cases[i].sample_index},
                       {"prompt_tokens", cases[i].ids.size()},
                       {"depth_asked", s.depth_asked},
                       {"depth", s.depth},
                       {"fact_kind", s.fact.kind},
                       {"fact", s.fact.statement},
                       {"question", s.fact.question},
                       {"answer_prefix", s.answer_prefix},
                       {"answer", s.fact.answer},
                       {"dense", OutcomeJson(dense[i], false)},
                       {"uniprefill", OutcomeJson(up[i], true)}});
  }
  return samples;
}

// Runs every case dense and with UniPrefill; false after one `error:` line.
bool RunAll(Engine& engine, const std::vector<eval::QaCase>& cases,
            std::vector<eval::QaOutcome>* dense, std::vector<eval::QaOutcome>* up) {
  ProgressBar bar("qa", "samples (dense + UniPrefill)", true);
  for (size_t i = 0; i < cases.size(); ++i) {
    for (bool with : {false, true}) {
      auto r = eval::RunQaCase(engine, cases[i], with);
      if (!r.ok()) {
        std::fprintf(stderr, "error: %s\n", r.status().message().c_str());
        return false;
      }
      (with ? up : dense)->push_back(std::move(*r));
    }
    bar.Update(static_cast<int64_t>(i + 1), static_cast<int64_t>(cases.size()));
  }
  bar.Finish();
  return true;
}

// The lengths, depths and corpus pieces the flags ask for; false after one `error:` line.
bool ParseInputs(const EvalQaOptions& o, std::vector<int>* lengths, std::vector<double>* depths,
                 std::vector<eval::CorpusPiece>* pieces) {
  auto parsed = ParseLayerList(o.lengths);
  bool positive = parsed.ok() && !parsed->empty();
  for (int n : positive ? *parsed : std::vector<int>{}) positive &= n > 0;
  if (!positive) {
    std::fprintf(stderr, "error: --lengths '%s' is not a list of positive token counts\n",
                 o.lengths.c_str());
    return false;
  }
  *lengths = *parsed;
  std::string error;
  if (!ParseDepthList(o.depths, depths, &error)) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return false;
  }
  eval::QaCorpusPaths paths;
  paths.docs_dir = std::string(UP_SOURCE_DIR) + "/docs";
  auto text = eval::LoadQaCorpus(o.corpus, paths);
  if (!text.ok()) {
    std::fprintf(stderr, "error: %s\n", text.status().message().c_str());
    return false;
  }
  *pieces = eval::SplitCorpus(*text);
  return true;
}

}  // namespace

bool ParseDepthList(const std::string& text, std::vector<double>* depths, std::string* error) {
  depths->clear();
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t used = 0;
    double d = -1;
    try {
      d = std::stod(item, &used);
    } catch (...) {
      used = 0;
    }
    if (item.empty() || used != item.size() || !(d >= 0 && d <= 1)) {
      *error = "--depths: '" + item + "' is not a depth in [0, 1] (expected e.g. 0.1,0.5,0.9)";
      return false;
    }
    depths->push_back(d);
  }
  if (depths->empty()) {
    *error = "--depths is empty (expected e.g. 0.1,0.5,0.9)";
    return false;
  }
  return true;
}

CLI::App* AddEvalQaCommand(CLI::App& eval, EvalQaOptions& o) {
  CLI::App* cmd = eval.add_subcommand(
      "qa", "Long-document QA on natural text: dense vs UniPrefill exact match, keep ratio, speed");
  o.model = ResolveModelArgument("smollm2");  // an instruct model: the task asks a question
  cmd->add_option("-m,--model", o.model,
                  "Model: a GGUF file, an HF checkpoint folder, or a short name (" +
                      KnownModelNames() + ")")
      ->capture_default_str();
  cmd->add_option("--corpus", o.corpus,
                  "Text the facts are hidden in: licenses (/usr/share/common-licenses), docs "
                  "(this repository's docs/*.md) or a text file")
      ->capture_default_str();
  cmd->add_option("--lengths", o.lengths, "Context lengths in tokens (prompt + answer budget)")
      ->capture_default_str();
  cmd->add_option("--depths", o.depths,
                  "Depths of the fact in [0, 1]; sample i of a length uses depth i mod count")
      ->capture_default_str();
  cmd->add_option("--samples", o.samples, "Samples per length")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the facts and excerpts")->capture_default_str();
  cmd->add_option("--chat", o.chat, "Wrap prompts in the chat template: auto, on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_option("-t,--threads", o.threads, "CPU threads (0 = every core)");
  AddDeviceFlags(*cmd, o.device);
  cmd->add_option("-o,--output", o.output, "Write results (per cell and per sample) as JSON");
  AddUniPrefillFlags(*cmd, o.uniprefill);
  return cmd;
}

int EvalQaCommand(const EvalQaOptions& o) {
  std::vector<int> lengths;
  std::vector<double> depths;
  std::vector<eval::CorpusPiece> pieces;
  if (!ParseInputs(o, &lengths, &depths, &pieces)) return 1;
  if (!CheckOutputWritable(o.output, "--output")) return 1;
  std::unique_ptr<Engine> loaded = LoadComparisonEngine(o.model, o.threads, o.device, o.uniprefill);
  if (!loaded) return 1;
  Engine& engine = *loaded;
  std::fprintf(stderr, "model: %s\nuniprefill: %s\n", engine.model_description().c_str(),
               engine.uniprefill_description().c_str());
  const int64_t total = static_cast<int64_t>(lengths.size()) * o.samples;
  ProgressBar build_bar("building prompts", "samples", true);
  int64_t built = 0;
  auto cases = eval::BuildQaCases(engine, pieces, lengths, depths, o.samples, o.seed,
                                  ParseChatMode(o.chat), [&] { build_bar.Update(++built, total); });
  build_bar.Finish();
  if (!cases.ok()) {
    std::fprintf(stderr, "error: %s\n", cases.status().message().c_str());
    return 1;
  }
  std::vector<eval::QaOutcome> dense, up;
  if (!RunAll(engine, *cases, &dense, &up)) return 1;

  const std::vector<QaPair> cells = Pairs(*cases, dense, up, /*by_depth=*/true);
  const std::vector<QaPair> per_length = Pairs(*cases, dense, up, /*by_depth=*/false);
  std::printf("%7s %6s %7s %9s %9s %7s %10s %10s %6s %9s %9s %8s\n", "length", "depth", "samples",
              "dense EM", "UniP EM", "delta", "dense has", "UniP has", "keep", "dense s",
              "UniP s", "speedup");
  for (const QaPair& p : cells) PrintRow(p);
  for (const QaPair& p : per_length) PrintRow(p);

  if (!o.output.empty()) {
    nlohmann::json cells_json = nlohmann::json::array(), lengths_json = nlohmann::json::array();
    for (const QaPair& p : cells) cells_json.push_back(PairJson(p));
    for (const QaPair& p : per_length) lengths_json.push_back(PairJson(p));
    nlohmann::json j = {{"command", "eval qa"},
                        {"date", UtcNow()},
                        {"model", engine.model_description()},
                        {"uniprefill", engine.uniprefill_description()},
                        {"threads", engine.threads()},
                        {"seed", o.seed},
                        {"corpus", o.corpus},
                        {"samples_per_length", o.samples},
                        {"lengths", lengths},
                        {"depths", depths},
                        {"per_length", lengths_json},
                        {"cells", cells_json},
                        {"samples", SamplesJson(*cases, dense, up)}};
    if (OwnsReports(engine) && !WriteJsonFile(o.output, j, "--output")) return 1;
  }
  return 0;
}

}  // namespace uniprefill::cli
