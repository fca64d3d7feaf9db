#include "calibrate_command.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/uniprefill_options_json.h"
#include "eval/ruler_runner.h"
#include "eval_ruler_command.h"
#include "model_names.h"
#include "output_files.h"
#include "progress_bar.h"
#include "run_command.h"
#include "sparsity/uniprefill_config.h"
#include "uniprefill/engine.h"

namespace uniprefill::cli {
namespace {

// "auto": the model's default set, each of its layers alone, and the default set moved one
// full-attention layer earlier (when that is a different, valid set). Otherwise "5,11;5;11".
Result<std::vector<std::vector<int>>> DropLayerSets(const std::string& text, const Engine& engine) {
  std::vector<std::vector<int>> sets;
  auto add = [&](const std::vector<int>& s) {
    if (!s.empty() && std::find(sets.begin(), sets.end(), s) == sets.end()) sets.push_back(s);
  };
  if (text == "auto") {
    const std::vector<int> def = *engine.uniprefill_options().drop_layers;
    const std::vector<int> full = engine.full_attention_layers();
    add(def);
    if (def.size() > 1) {
      for (int l : def) add({l});
    }
    std::vector<int> earlier;
    for (int l : def) {
      auto it = std::find(full.begin(), full.end(), l);
      if (it != full.begin() && it != full.end()) earlier.push_back(*(it - 1));
    }
    std::sort(earlier.begin(), earlier.end());
    earlier.erase(std::unique(earlier.begin(), earlier.end()), earlier.end());
    if (!earlier.empty() && earlier.front() > 0) add(earlier);
    return sets;
  }
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ';')) {
    UP_ASSIGN_OR_RETURN(std::vector<int> s, ParseLayerList(item));
    if (s.empty()) return InvalidArgument("--drop-layer-sets: an empty set (between ';')");
    add(s);
  }
  if (sets.empty()) return InvalidArgument("--drop-layer-sets is empty");
  return sets;
}

struct Candidate {
  UniPrefillOptions options;
  std::string label;
  std::vector<eval::RulerOutcome> outcomes;
  double mean_accuracy = 0, speedup = 0, keep_ratio = 0, worst_task_drop = 0;
  std::string worst_task;
  bool meets_bar = false, on_frontier = false;
};

std::string Label(const UniPrefillOptions& o) {
  char buf[128];
  const std::string window(ToString(*o.window));
  if (*o.mode == SelectionMode::kTopP) {
    std::snprintf(buf, sizeof buf, "layers %s top-p %.3g %s",
                  LayerListToString(*o.drop_layers).c_str(), *o.top_p, window.c_str());
  } else {
    std::snprintf(buf, sizeof buf, "layers %s keep %.2g %s",
                  LayerListToString(*o.drop_layers).c_str(), *o.keep_ratio, window.c_str());
  }
  return buf;
}

}  // namespace

void AddCalibrateCommand(CLI::App& app, CalibrateOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Sweep UniPrefill settings on RULER-style tasks: speed/accuracy frontier and a "
      "recommended config file");
  o.model = DefaultModelPath();
  cmd->add_option("-m,--model", o.model, "Model (GGUF file or HF checkpoint folder)")
      ->capture_default_str();
  cmd->add_option("--tasks", o.tasks, "'all' or a comma list of RULER task names")
      ->capture_default_str();
  cmd->add_option("--lengths", o.lengths, "Context lengths in tokens")->capture_default_str();
  cmd->add_option("--samples", o.samples, "Samples per task and length")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the generated tasks")->capture_default_str();
  cmd->add_option("--chat", o.chat, "Chat template: auto, on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_option("--p-values", o.p_values, "top-p values to try (empty: none)")
      ->capture_default_str();
  cmd->add_option("--keep-ratios", o.keep_ratios, "fixed-ratio keep ratios to try (empty: none)")
      ->capture_default_str();
  cmd->add_option("--drop-layer-sets", o.drop_layer_sets,
                  "'auto' or sets separated by ';', e.g. '5,11;5;11'")
      ->capture_default_str();
  cmd->add_option("--window-modes", o.window_modes,
                  "Sliding-window modes after a drop to try: alive, position or both")
      ->capture_default_str();
  cmd->add_option("--max-mean-drop", o.max_mean_drop,
                  "Largest allowed drop of mean accuracy vs dense (points)")
      ->capture_default_str();
  cmd->add_option("--max-task-drop", o.max_task_drop,
                  "Largest allowed drop on any task where dense scores above 20 (points)")
      ->capture_default_str();
  cmd->add_option("-t,--threads", o.threads, "CPU threads (0 = every core)");
  AddDeviceFlags(*cmd, o.device);
  cmd->add_option("-o,--output", o.output, "Write every setting's results as JSON");
  cmd->add_option("--write-config", o.write_config,
                  "Write the recommended setting (for --uniprefill-config)");
}

int CalibrateCommand(const CalibrateOptions& o) {
  std::vector<std::string> tasks;
  std::string error;
  if (!ParseRulerTaskList(o.tasks, &tasks, &error)) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return 1;
  }
  auto lengths = ParseLayerList(o.lengths);
  if (!lengths.ok() || lengths->empty()) {
    std::fprintf(stderr, "error: --lengths '%s' is not a list of token counts\n",
                 o.lengths.c_str());
    return 1;
  }
  auto ps = ParseUnitFloats(o.p_values, "--p-values");
  auto keeps = ps.ok() ? ParseUnitFloats(o.keep_ratios, "--keep-ratios") : ps;
  if (!ps.ok() || !keeps.ok()) {
    std::fprintf(stderr, "error: %s\n",
                 (!ps.ok() ? ps.status() : keeps.status()).message().c_str());
    return 1;
  }
  if (ps->empty() && keeps->empty()) {
    std::fprintf(stderr, "error: nothing to sweep: --p-values and --keep-ratios are both empty\n");
    return 1;
  }
  if (!CheckOutputWritable(o.output, "--output") ||
      !CheckOutputWritable(o.write_config, "--write-config")) {
    return 1;
  }
  std::vector<WindowMode> windows;
  {
    std::stringstream ss(o.window_modes);
    for (std::string w; std::getline(ss, w, ',');) {
      const std::optional<WindowMode> window = WindowModeFromString(w);
      if (!window) {
        std::fprintf(stderr, "error: --window-modes: '%s' is not alive or position\n", w.c_str());
        return 1;
      }
      windows.push_back(*window);
    }
    if (windows.empty()) {
      std::fprintf(stderr, "error: --window-modes is empty (give alive, position or both)\n");
      return 1;
    }
  }
  EngineOptions eo;
  eo.model_path = ResolveModelArgument(o.model);
  eo.threads = o.threads;
  o.device.ApplyTo(eo);
  auto loaded = Engine::Load(eo);
  if (!loaded.ok()) {
    std::fprintf(stderr, "error: %s\n", loaded.status().message().c_str());
    return 1;
  }
  Engine& engine = **loaded;
  if (!SilenceOtherRanks(engine)) return 1;
  auto sets = DropLayerSets(o.drop_layer_sets, engine);
  if (!sets.ok()) {
    std::fprintf(stderr, "error: %s\n", sets.status().message().c_str());
    return 1;
  }
  const UniPrefillOptions base = engine.uniprefill_options();
  std::vector<Candidate> candidates;
  for (const std::vector<int>& layers : *sets) {
    for (const WindowMode window : windows) {
      auto add = [&](SelectionMode mode, float value) {
        Candidate c;
        c.options = base;
        c.options.source = "calibrate";
        c.options.window = window;
        c.options.drop_layers = layers;
        c.options.mode = mode;
        c.options.top_p.reset();
        c.options.keep_ratio.reset();
        (mode == SelectionMode::kTopP ? c.options.top_p : c.options.keep_ratio) = value;
        c.label = Label(c.options);
        candidates.push_back(c);
      };
      for (float p : *ps) add(SelectionMode::kTopP, p);
      for (float k : *keeps) add(SelectionMode::kFixedRatio, k);
    }
  }
  for (const Candidate& c : candidates) {
    auto valid = engine.DescribeUniPrefillOptions(c.options);
    if (!valid.ok()) {
      std::fprintf(stderr, "error: setting '%s': %s\n", c.label.c_str(),
                   valid.status().message().c_str());
      return 1;
    }
  }
  std::fprintf(stderr,
               "model: %s\ncalibrating %zu settings on %zu tasks x %zu lengths x %d samples\n",
               engine.model_description().c_str(), candidates.size(), tasks.size(), lengths->size(),
               o.samples);
  const eval::ChatMode chat = ParseChatMode(o.chat);
  auto cases = eval::BuildRulerCases(engine, tasks, *lengths, o.samples, o.seed, chat);
  if (!cases.ok()) {
    std::fprintf(stderr, "error: %s\n", cases.status().message().c_str());
    return 1;
  }
  std::vector<eval::RulerOutcome> dense;
  ProgressBar bar("calibrate", "runs", true);
  const int64_t total = static_cast<int64_t>(cases->size() * (1 + candidates.size()));
  int64_t done = 0;
  for (size_t i = 0; i < cases->size(); ++i) {
    auto d = eval::RunRulerCase(engine, (*cases)[i], false);
    if (!d.ok()) {
      std::fprintf(stderr, "error: %s\n", d.status().message().c_str());
      return 1;
    }
    dense.push_back(std::move(*d));
    bar.Update(++done, total);
    for (Candidate& c : candidates) {
      auto r = eval::RunRulerCase(engine, (*cases)[i], true, c.options);
      if (!r.ok()) {
        std::fprintf(stderr, "error: %s\n", r.status().message().c_str());
        return 1;
      }
      c.outcomes.push_back(std::move(*r));
      bar.Update(++done, total);
    }
  }
  bar.Finish();

  // Per task means over all lengths and samples: the bar is checked per task.
  const std::vector<eval::RulerCell> dense_cells = eval::AggregateRuler(*cases, dense);
  auto task_means = [&](const std::vector<eval::RulerCell>& cells) {
    std::vector<double> m(tasks.size(), 0);
    std::vector<int> n(tasks.size(), 0);
    for (const eval::RulerCell& cell : cells) {
      const size_t t = std::find(tasks.begin(), tasks.end(), cell.task) - tasks.begin();
      m[t] += cell.accuracy;
      n[t] += 1;
    }
    for (size_t t = 0; t < m.size(); ++t) m[t] /= std::max(1, n[t]);
    return m;
  };
  const std::vector<double> dense_task = task_means(dense_cells);
  double dense_mean = 0, dense_s = 0;
  for (double a : dense_task) dense_mean += a / dense_task.size();
  for (const eval::RulerOutcome& d : dense) dense_s += d.prefill_s;
  for (Candidate& c : candidates) {
    const std::vector<double> t = task_means(eval::AggregateRuler(*cases, c.outcomes));
    double s = 0;
    for (size_t k = 0; k < t.size(); ++k) {
      c.mean_accuracy += t[k] / t.size();
      const double drop = dense_task[k] - t[k];
      if (dense_task[k] > 20 && drop > c.worst_task_drop) {
        c.worst_task_drop = drop;
        c.worst_task = tasks[k];
      }
    }
    for (const eval::RulerOutcome& r : c.outcomes) {
      s += r.prefill_s;
      c.keep_ratio += r.keep_ratio / c.outcomes.size();
    }
    c.speedup = s > 0 ? dense_s / s : 0;
    c.meets_bar =
        dense_mean - c.mean_accuracy <= o.max_mean_drop && c.worst_task_drop <= o.max_task_drop;
  }
  // Pareto frontier: no other setting is at least as fast and as accurate, and better in one.
  for (Candidate& c : candidates) {
    c.on_frontier = std::none_of(candidates.begin(), candidates.end(), [&](const Candidate& d) {
      return d.speedup >= c.speedup && d.mean_accuracy >= c.mean_accuracy &&
             (d.speedup > c.speedup || d.mean_accuracy > c.mean_accuracy);
    });
  }
  std::vector<size_t> order(candidates.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return candidates[a].speedup > candidates[b].speedup; });
  const Candidate* best = nullptr;
  for (size_t i : order) {
    if (candidates[i].meets_bar) {
      best = &candidates[i];
      break;
    }
  }
  std::printf("%-30s %9s %8s %7s %8s  %-22s %s\n", "setting", "accuracy", "delta", "keep",
              "speedup", "worst task drop", "");
  std::printf("%-30s %9.1f %8s %7s %8s\n", "dense", dense_mean, "", "1.000", "1.00x");
  for (size_t i : order) {
    const Candidate& c = candidates[i];
    char worst[64];
    std::snprintf(worst, sizeof worst, "%.1f %s", c.worst_task_drop, c.worst_task.c_str());
    std::printf("%-30s %9.1f %+8.1f %7.3f %7.2fx  %-22s %s%s%s\n", c.label.c_str(), c.mean_accuracy,
                c.mean_accuracy - dense_mean, c.keep_ratio, c.speedup, worst,
                c.on_frontier ? "frontier " : "", c.meets_bar ? "within bar" : "",
                &c == best ? "  <- recommended" : "");
  }
  UniPrefillOptions recommended;
  if (best) {
    recommended = best->options;
    std::printf("recommended: %s (%.2fx prefill, accuracy %+.1f vs dense)\n", best->label.c_str(),
                best->speedup, best->mean_accuracy - dense_mean);
  } else {
    recommended.enabled = false;
    std::printf(
        "recommended: UniPrefill off (no setting stayed within %.1f points of dense on "
        "average and %.1f on every task)\n",
        o.max_mean_drop, o.max_task_drop);
  }
  if (!o.write_config.empty() && OwnsReports(engine)) {
    if (!WriteJsonFile(o.write_config, UniPrefillOptionsToJson(recommended), "--write-config")) {
      return 1;
    }
    std::printf("wrote %s (use it with --uniprefill-config %s)\n", o.write_config.c_str(),
                o.write_config.c_str());
  }
  if (!o.output.empty() && OwnsReports(engine)) {
    nlohmann::json settings = nlohmann::json::array();
    for (const Candidate& c : candidates) {
      settings.push_back({{"label", c.label},
                          {"options", UniPrefillOptionsToJson(c.options)},
                          {"mean_accuracy", c.mean_accuracy},
                          {"speedup", c.speedup},
                          {"keep_ratio", c.keep_ratio},
                          {"worst_task_drop", c.worst_task_drop},
                          {"worst_task", c.worst_task},
                          {"meets_bar", c.meets_bar},
                          {"on_frontier", c.on_frontier}});
    }
    nlohmann::json j = {{"command", "calibrate"},
                        {"model", engine.model_description()},
                        {"threads", engine.threads()},
                        {"tasks", tasks},
                        {"lengths", *lengths},
                        {"samples_per_cell", o.samples},
                        {"seed", o.seed},
                        {"dense_mean_accuracy", dense_mean},
                        {"dense_task_accuracy", dense_task},
                        {"settings", settings},
                        {"recommended", UniPrefillOptionsToJson(recommended)}};
    if (!WriteJsonFile(o.output, j, "--output")) return 1;
  }
  return 0;
}

}  // namespace uniprefill::cli
