#include "eval_fidelity_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "eval/haystacks.h"
#include "output_files.h"
#include "run_command.h"
#include "sparsity/uniprefill_config.h"
#include "uniprefill/engine.h"

namespace uniprefill::cli {
namespace {

// log-softmax in double.
std::vector<double> LogSoftmax(const std::vector<float>& logits) {
  const double mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l) - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = double(logits[i]) - lse;
  return out;
}

// KL(p || q) for log-probabilities lp, lq.
double Kl(const std::vector<double>& lp, const std::vector<double>& lq) {
  double kl = 0;
  for (size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  return std::max(0.0, kl);
}

int Argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

CLI::App* AddEvalFidelityCommand(CLI::App& eval, EvalFidelityOptions& o) {
  CLI::App* cmd = eval.add_subcommand(
      "fidelity", "UniPrefill vs dense: first-token top-1 agreement and KL, greedy agreement");
  o.model = DefaultModelPath();
  cmd->add_option("-m,--model", o.model, "Model (GGUF file or HF checkpoint folder)")
      ->capture_default_str();
  cmd->add_option("-f,--prompt-file", o.prompt_files,
                  "Text files to use as prompts (cut to each length); default: built-in reports");
  cmd->add_option("--lengths", o.lengths, "Prompt lengths in tokens")->capture_default_str();
  cmd->add_option("--samples", o.samples, "Prompts per length (built-in generator)")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  cmd->add_option("--greedy-tokens", o.greedy_tokens, "Greedy tokens compared per prompt")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the built-in prompts")->capture_default_str();
  cmd->add_option("-t,--threads", o.threads, "CPU threads (0 = every core)");
  AddDeviceFlags(*cmd, o.device);
  cmd->add_option("-o,--output", o.output, "Write per-prompt results and the summary as JSON");
  AddUniPrefillFlags(*cmd, o.uniprefill);
  return cmd;
}

int EvalFidelityCommand(const EvalFidelityOptions& o) {
  auto lengths = ParseLayerList(o.lengths);
  if (!lengths.ok() || lengths->empty()) {
    std::fprintf(stderr, "error: --lengths '%s' is not a list of token counts\n", o.lengths.c_str());
    return 1;
  }
  std::vector<std::string> texts;
  for (const std::string& path : o.prompt_files) {
    std::ifstream in(path);
    if (!in) {
      std::fprintf(stderr, "error: cannot read --prompt-file '%s'\n", path.c_str());
      return 1;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    texts.push_back(ss.str());
  }
  if (!CheckOutputWritable(o.output, "--output")) return 1;
  std::unique_ptr<Engine> loaded = LoadComparisonEngine(o.model, o.threads, o.device, o.uniprefill);
  if (!loaded) return 1;
  Engine& engine = *loaded;
  if (!engine.can_tokenize()) {
    std::fprintf(stderr, "error: the model has no tokenizer this engine can read\n");
    return 1;
  }
  std::fprintf(stderr, "model: %s\nuniprefill: %s\n", engine.model_description().c_str(),
               engine.uniprefill_description().c_str());
  nlohmann::json rows = nlohmann::json::array();
  double sum_top1 = 0, sum_kl = 0, sum_greedy = 0;
  int n = 0;
  std::printf("%8s %6s %6s %12s %14s  %s\n", "tokens", "prompt", "top-1", "KL", "greedy agree",
              "kept per drop layer");
  for (int len : *lengths) {
    const int count = texts.empty() ? o.samples : static_cast<int>(texts.size());
    for (int s = 0; s < count; ++s) {
      // Built-in prompts: enough words for the length (~1.3 tokens per word), cut to tokens.
      const std::string text =
          texts.empty() ? eval::GenerateReportText(o.seed * 1000003 + s, len) : texts[s];
      std::vector<int32_t> ids = engine.Tokenize(text, /*add_bos=*/true);
      if (static_cast<int>(ids.size()) < len) {
        std::fprintf(stderr, "error: prompt %d has %zu tokens, fewer than --lengths %d\n", s,
                     ids.size(), len);
        return 1;
      }
      ids.resize(len);
      if (len + o.greedy_tokens > engine.context_size()) {
        std::fprintf(stderr, "error: %d tokens + %d generated exceed the context of %d\n", len,
                     o.greedy_tokens, engine.context_size());
        return 1;
      }
      GenerationResult runs[2];
      for (int up = 0; up < 2; ++up) {
        SamplingParams sp;
        sp.max_tokens = o.greedy_tokens;
        sp.stop_at_end_of_turn = false;
        sp.uniprefill = up == 1;
        sp.return_first_logits = true;
        auto r = engine.Generate(ids, sp);
        if (!r.ok()) {
          std::fprintf(stderr, "error: %s\n", r.status().message().c_str());
          return 1;
        }
        runs[up] = std::move(*r);
      }
      const bool top1 = Argmax(runs[0].first_logits) == Argmax(runs[1].first_logits);
      const double kl = Kl(LogSoftmax(runs[0].first_logits), LogSoftmax(runs[1].first_logits));
      int agree = 0;  // leading greedy tokens that agree
      while (agree < static_cast<int>(std::min(runs[0].tokens.size(), runs[1].tokens.size())) &&
             runs[0].tokens[agree] == runs[1].tokens[agree]) {
        ++agree;
      }
      std::string kept;
      nlohmann::json kept_json = nlohmann::json::array();
      for (const KeptTokensInfo& k : runs[1].kept) {
        kept += "L" + std::to_string(k.layer) + " " + std::to_string(k.kept) + "/" +
                std::to_string(k.alive) + " ";
        kept_json.push_back({{"layer", k.layer}, {"kept", k.kept}, {"alive", k.alive}});
      }
      std::printf("%8d %6d %6s %12.3e %11d/%-2d  %s\n", len, s, top1 ? "yes" : "no", kl, agree,
                  o.greedy_tokens, kept.c_str());
      std::fflush(stdout);
      rows.push_back({{"tokens", len}, {"prompt", s}, {"top1_agree", top1}, {"kl", kl},
                      {"greedy_agree_prefix", agree}, {"greedy_tokens", o.greedy_tokens},
                      {"dense_ttft_s", runs[0].stats.ttft_s},
                      {"uniprefill_ttft_s", runs[1].stats.ttft_s}, {"kept", kept_json}});
      sum_top1 += top1;
      sum_kl += kl;
      sum_greedy += double(agree) / o.greedy_tokens;
      ++n;
    }
  }
  std::printf("mean: top-1 agreement %.3f | KL %.3e | greedy prefix agreement %.3f (%d prompts)\n",
              sum_top1 / n, sum_kl / n, sum_greedy / n, n);
  if (!o.output.empty()) {
    nlohmann::json j = {{"model", engine.model_description()},
                        {"uniprefill", engine.uniprefill_description()},
                        {"prompts", rows},
                        {"mean_top1_agreement", sum_top1 / n},
                        {"mean_kl", sum_kl / n},
                        {"mean_greedy_prefix_agreement", sum_greedy / n}};
    if (OwnsReports(engine) && !WriteJsonFile(o.output, j, "--output")) return 1;
  }
  return 0;
}

}  // namespace uniprefill::cli
