#include "bench_prefill_command.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "output_files.h"
#include "run_command.h"
#include "sparsity/uniprefill_config.h"
#include "uniprefill/engine.h"

namespace uniprefill::cli {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

void AddBenchPrefillCommand(CLI::App& app, BenchPrefillOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "bench-prefill", "Dense vs UniPrefill time-to-first-token at several prompt lengths");
  o.model = DefaultModelPath();
  cmd->add_option("-m,--model", o.model, "Model (GGUF file or HF checkpoint folder)")
      ->capture_default_str();
  auto* file = cmd->add_option("-f,--prompt-file", o.prompt_file,
                               "Long text; each length uses its first tokens");
  auto* random = cmd->add_flag("--random-tokens", o.random_tokens,
                               "Random token ids instead of a text (random-weight checkpoints)");
  file->excludes(random);
  cmd->add_option("--lengths", o.lengths, "Prompt lengths in tokens")->capture_default_str();
  cmd->add_option("--repeats", o.repeats, "Runs per (length, mode); medians are reported")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("-t,--threads", o.threads, "CPU threads (0 = every core)");
  AddDeviceFlags(*cmd, o.device);
  cmd->add_option("--json", o.json_out, "Write the results as JSON here");
  AddUniPrefillFlags(*cmd, o.uniprefill);
}

int BenchPrefillCommand(const BenchPrefillOptions& o) {
  auto lengths = ParseLayerList(o.lengths);  // a comma-separated int list
  if (!lengths.ok() || lengths->empty()) {
    std::fprintf(stderr, "error: --lengths '%s' is not a list of token counts\n", o.lengths.c_str());
    return 1;
  }
  std::stringstream text;
  if (!o.random_tokens) {
    std::ifstream in(o.prompt_file);
    if (o.prompt_file.empty() || !in) {
      std::fprintf(stderr, "error: cannot read --prompt-file '%s' (or pass --random-tokens)\n",
                   o.prompt_file.c_str());
      return 1;
    }
    text << in.rdbuf();
  }
  std::unique_ptr<Engine> loaded = LoadComparisonEngine(o.model, o.threads, o.device, o.uniprefill);
  if (!loaded) return 1;
  Engine& engine = *loaded;
  std::vector<int32_t> all;
  if (o.random_tokens) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> dist(3, engine.vocab_size() - 1);
    int max_len = 0;
    for (int len : *lengths) max_len = std::max(max_len, len);
    for (int i = 0; i < max_len; ++i) all.push_back(dist(rng));
  } else if (!engine.can_tokenize()) {
    std::fprintf(stderr, "error: the model has no tokenizer; pass --random-tokens\n");
    return 1;
  } else {
    all = engine.Tokenize(text.str(), /*add_bos=*/true);
  }
  std::fprintf(stderr, "model: %s | %d threads\nuniprefill: %s\ntext: %zu tokens\n",
               engine.model_description().c_str(), engine.threads(),
               engine.uniprefill_description().c_str(), all.size());
  nlohmann::json runs = nlohmann::json::array();
  std::printf("%8s %12s %12s %8s %10s  %s\n", "tokens", "dense TTFT", "UniPrefill", "speedup",
              "overhead", "kept per drop layer");
  for (int len : *lengths) {
    if (len < 2 || static_cast<size_t>(len) > all.size() || len >= engine.context_size()) {
      std::fprintf(stderr, "error: length %d needs a text of at least %d tokens within the "
                   "context (%zu tokens, context %d)\n", len, len, all.size(), engine.context_size());
      return 1;
    }
    const std::vector<int32_t> ids(all.begin(), all.begin() + len);
    std::vector<double> dense, sparse, overhead;
    std::vector<KeptTokensInfo> kept;
    int host_syncs = 0;  // UniPrefill's drop-layer host syncs (GPU, per prefill)
    for (int r = 0; r < o.repeats; ++r) {
      for (bool up : {false, true}) {
        SamplingParams sp;
        sp.max_tokens = 1;
        sp.uniprefill = up;
        auto res = engine.Generate(ids, sp);
        if (!res.ok()) {
          std::fprintf(stderr, "error: %s\n", res.status().message().c_str());
          return 1;
        }
        const GenerationStats& s = res->stats;
        (up ? sparse : dense).push_back(s.ttft_s);
        if (up) {
          overhead.push_back((s.uniprefill_scoring_s + s.uniprefill_selection_s +
                              s.uniprefill_compaction_s) / s.ttft_s);
          kept = res->kept;
          host_syncs = s.uniprefill_host_syncs;
        }
        std::fprintf(stderr, "  %d tokens %s run %d: %.2f s\n", len, up ? "uniprefill" : "dense",
                     r + 1, s.ttft_s);
      }
    }
    const double d = Median(dense), u = Median(sparse), ov = Median(overhead);
    std::string kept_str;
    nlohmann::json kept_json = nlohmann::json::array();
    for (const KeptTokensInfo& k : kept) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "L%d %d/%d (%.2f) ", k.layer, k.kept, k.alive,
                    double(k.kept) / k.alive);
      kept_str += buf;
      kept_json.push_back({{"layer", k.layer}, {"kept", k.kept}, {"alive", k.alive}});
    }
    std::printf("%8d %10.2f s %10.2f s %7.2fx %9.2f%%  %s\n", len, d, u, d / u, 100 * ov,
                kept_str.c_str());
    std::fflush(stdout);
    runs.push_back({{"tokens", len}, {"dense_ttft_s", dense}, {"uniprefill_ttft_s", sparse},
                    {"dense_median_s", d}, {"uniprefill_median_s", u}, {"speedup", d / u},
                    {"overhead_share_median", ov}, {"kept", kept_json},
                    {"keep_ratio", KeepRatio(kept)},
                    {"uniprefill_host_syncs", host_syncs}});
  }
  if (!o.json_out.empty() && OwnsReports(engine)) {
    nlohmann::json j = {{"model", engine.model_description()},
                        {"uniprefill", engine.uniprefill_description()},
                        {"threads", engine.threads()},
                        {"hardware_threads", std::thread::hardware_concurrency()},
                        {"prompt_file", o.prompt_file},
                        {"repeats", o.repeats},
                        {"runs", runs}};
    std::ofstream out(o.json_out);
    out << j.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "error: cannot write --json file '%s'\n", o.json_out.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace uniprefill::cli
