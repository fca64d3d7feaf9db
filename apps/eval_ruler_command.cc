#include "eval_ruler_command.h"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "eval/ruler_runner.h"
#include "eval/ruler_tasks.h"
#include "eval/svg_chart.h"
#include "output_files.h"
#include "progress_bar.h"
#include "serve_command.h"
#include "run_command.h"
#include "sparsity/uniprefill_config.h"

namespace uniprefill::cli {
namespace {

// One (task, length) with both settings.
struct CellPair {
  eval::RulerCell dense, uniprefill;
  double speedup() const {
    return uniprefill.prefill_s > 0 ? dense.prefill_s / uniprefill.prefill_s : 0;
  }
};

// The acceptance rule: mean over tasks within 1 point of dense, and within 3 points on
// every task where dense scores above 20.
struct BarVerdict {
  double mean_dense = 0, mean_uniprefill = 0, worst_task_drop = 0;
  std::string worst_task;
  bool ok = true;
};

BarVerdict CheckBar(const std::vector<const CellPair*>& cells) {
  BarVerdict v;
  for (const CellPair* c : cells) {
    v.mean_dense += c->dense.accuracy / cells.size();
    v.mean_uniprefill += c->uniprefill.accuracy / cells.size();
    const double drop = c->dense.accuracy - c->uniprefill.accuracy;
    if (c->dense.accuracy > 20 && drop > v.worst_task_drop) {
      v.worst_task_drop = drop;
      v.worst_task = c->dense.task;
    }
  }
  v.ok = v.mean_dense - v.mean_uniprefill <= 1.0 && v.worst_task_drop <= 3.0;
  return v;
}

bool WritePlot(const std::string& path, const std::vector<CellPair>& pairs,
               const std::vector<std::string>& tasks, const std::vector<int>& lengths,
               const std::string& title) {
  std::vector<eval::ChartPanel> panels;
  auto panel_for = [&](const std::string& name, auto select) {
    eval::ChartPanel p;
    p.title = name;
    eval::ChartSeries d, u;
    d.name = "dense";
    u.name = "UniPrefill";
    u.dashed = true;
    for (int len : lengths) {
      std::vector<const CellPair*> cells = select(len);
      if (cells.empty()) continue;
      double dense = 0, up = 0, keep = 0, ds = 0, us = 0;
      for (const CellPair* c : cells) {
        dense += c->dense.accuracy / cells.size();
        up += c->uniprefill.accuracy / cells.size();
        keep += c->uniprefill.keep_ratio / cells.size();
        ds += c->dense.prefill_s;
        us += c->uniprefill.prefill_s;
      }
      d.x.push_back(len);
      d.y.push_back(dense);
      u.x.push_back(len);
      u.y.push_back(up);
      char label[64];
      std::snprintf(label, sizeof label, "keep %.2f, %.2fx", keep, us > 0 ? ds / us : 0.0);
      u.point_labels.push_back(label);
    }
    p.series = {d, u};
    panels.push_back(p);
  };
  panel_for("average over tasks", [&](int len) {
    std::vector<const CellPair*> v;
    for (const CellPair& c : pairs) {
      if (c.dense.length == len) v.push_back(&c);
    }
    return v;
  });
  for (const std::string& task : tasks) {
    panel_for(task, [&](int len) {
      std::vector<const CellPair*> v;
      for (const CellPair& c : pairs) {
        if (c.dense.length == len && c.dense.task == task) v.push_back(&c);
      }
      return v;
    });
  }
  eval::ChartOptions o;
  o.title = title;
  o.x_label = "context length (tokens)";
  o.y_label = "accuracy (%)";
  o.log2_x = true;
  o.y_min = 0;
  o.y_max = 100;
  Status st = eval::WriteSvgChart(path, panels, o);
  if (!st.ok()) std::fprintf(stderr, "error: %s\n", st.message().c_str());
  return st.ok();
}

// "keep 0.5": the name of a fixed-ratio setting in tables and JSON.
std::string KeepLabel(float k) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "keep %.3g", k);
  return buf;
}

}  // namespace

Result<std::vector<float>> ParseUnitFloats(const std::string& text, const std::string& flag) {
  std::vector<float> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    try {
      size_t used = 0;
      const float v = std::stof(item, &used);
      if (used != item.size() || !(v > 0 && v <= 1)) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      return InvalidArgument(flag + ": '" + item + "' is not a number in (0, 1]");
    }
  }
  return out;
}

std::string LengthLabel(int n) {
  return n % 1024 == 0 ? std::to_string(n / 1024) + "K" : std::to_string(n);
}

std::string UtcNow() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

bool ParseRulerTaskList(const std::string& text, std::vector<std::string>* tasks,
                        std::string* error) {
  tasks->clear();
  if (text == "all") {
    for (const eval::RulerTaskInfo& t : eval::RulerTasks()) tasks->push_back(t.name);
    return true;
  }
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto task = eval::FindRulerTask(item);
    if (!task.ok()) {
      *error = "--tasks: " + task.status().message();
      return false;
    }
    tasks->push_back(item);
  }
  if (tasks->empty()) {
    *error = "--tasks is empty (give 'all' or a comma list of task names)";
    return false;
  }
  return true;
}

eval::ChatMode ParseChatMode(const std::string& text) {
  if (text == "on") return eval::ChatMode::kOn;
  if (text == "off") return eval::ChatMode::kOff;
  return eval::ChatMode::kAuto;
}

CLI::App* AddEvalRulerCommand(CLI::App& eval, EvalRulerOptions& o) {
  CLI::App* cmd = eval.add_subcommand(
      "ruler", "RULER-style long-context tasks: dense vs UniPrefill accuracy, keep ratio, speed");
  o.model = DefaultModelPath();
  cmd->add_option("-m,--model", o.model, "Model (GGUF file or HF checkpoint folder)")
      ->capture_default_str();
  std::string names;
  for (const eval::RulerTaskInfo& t : eval::RulerTasks())
    names += (names.empty() ? "" : ",") + t.name;
  cmd->add_option("--tasks", o.tasks, "'all' or a comma list of: " + names)->capture_default_str();
  cmd->add_option("--lengths", o.lengths, "Context lengths in tokens (prompt + answer budget)")
      ->capture_default_str();
  cmd->add_option("--samples", o.samples, "Samples per task and length")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the generated tasks")->capture_default_str();
  cmd->add_option("--chat", o.chat, "Wrap prompts in the chat template: auto, on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_option("--keep-ratios", o.keep_ratios,
                  "Also run fixed-ratio UniPrefill at these keep ratios (comma list, e.g. "
                  "0.5,0.3), each beside dense and the default settings on the same prompts")
      ->capture_default_str();
  cmd->add_option("--batch", o.batch,
                  "Requests in flight at once (1: one by one, with prefill times; more: through "
                  "the batch engine, many decodes per step, prefill times not measured)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--kv-cache-memory", o.kv_cache_memory,
                  "KV memory of the batch engine with --batch > 1 (e.g. 16GiB)")
      ->capture_default_str();
  cmd->add_option("-t,--threads", o.threads, "CPU threads (0 = every core)");
  AddDeviceFlags(*cmd, o.device);
  cmd->add_option("-o,--output", o.output, "Write results (per cell and per sample) as JSON");
  cmd->add_option("--plot", o.plot, "Write an SVG plot of accuracy vs context length");
  AddUniPrefillFlags(*cmd, o.uniprefill);
  return cmd;
}

int EvalRulerCommand(const EvalRulerOptions& o) {
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
  auto keeps = ParseUnitFloats(o.keep_ratios, "--keep-ratios");
  if (!keeps.ok()) {
    std::fprintf(stderr, "error: %s\n", keeps.status().message().c_str());
    return 1;
  }
  if (!CheckOutputWritable(o.output, "--output") || !CheckOutputWritable(o.plot, "--plot")) {
    return 1;
  }
  if (o.batch > 1 && o.device.tensor_parallel > 1) {
    std::fprintf(stderr, "error: eval ruler --batch > 1 runs a BatchEngine, which under "
                         "--tensor-parallel needs its followers on the other ranks (only `serve` "
                         "has them so far); use --batch 1\n");
    return 1;
  }
  std::unique_ptr<Engine> loaded = LoadComparisonEngine(o.model, o.threads, o.device, o.uniprefill);
  if (!loaded) return 1;
  Engine& engine = *loaded;
  std::fprintf(stderr, "model: %s\nuniprefill: %s\n", engine.model_description().c_str(),
               engine.uniprefill_description().c_str());
  const eval::ChatMode chat = ParseChatMode(o.chat);
  const int64_t total = static_cast<int64_t>(tasks.size() * lengths->size()) * o.samples;
  ProgressBar build_bar("building prompts", "samples", true);
  int64_t built = 0;
  auto cases = eval::BuildRulerCases(engine, tasks, *lengths, o.samples, o.seed, chat,
                                     [&] { build_bar.Update(++built, total); });
  build_bar.Finish();
  if (!cases.ok()) {
    std::fprintf(stderr, "error: %s\n", cases.status().message().c_str());
    return 1;
  }
  // Dense, the engine's settings, then one fixed-ratio setting per --keep-ratios value (the
  // engine's drop layers and window mode, so a batch can run them side by side).
  std::vector<eval::RulerSetting> settings = {{"dense", false, std::nullopt},
                                              {"default", true, std::nullopt}};
  for (float k : *keeps) {
    UniPrefillOptions fixed;
    fixed.mode = SelectionMode::kFixedRatio;
    fixed.keep_ratio = k;
    fixed.source = "--keep-ratios";
    auto valid = engine.DescribeUniPrefillOptions(fixed);
    if (!valid.ok()) {
      std::fprintf(stderr, "error: --keep-ratios %g: %s\n", k, valid.status().message().c_str());
      return 1;
    }
    settings.push_back({KeepLabel(k), true, fixed});
  }
  eval::RulerRunOptions run;
  run.batch = o.batch;
  if (!ParseByteSize(o.kv_cache_memory, &run.kv_cache_memory)) {
    std::fprintf(stderr, "error: --kv-cache-memory '%s' is not a size such as 16GiB\n",
                 o.kv_cache_memory.c_str());
    return 1;
  }
  eval::RulerRunReport report;
  ProgressBar bar("ruler", "runs (dense + UniPrefill settings)", true);
  // Also a plain line on stdout every ~10%, so a log cut off midway says how far it got.
  int64_t last_logged = 0;
  auto runs = eval::RunRulerSettings(engine, *cases, settings, run, &report,
                                     [&](int64_t runs_done, int64_t runs_total) {
                                       bar.Update(runs_done, runs_total);
                                       if (runs_done == runs_total ||
                                           runs_done - last_logged >= runs_total / 10 + 1) {
                                         std::printf("progress: %lld/%lld runs\n",
                                                     static_cast<long long>(runs_done),
                                                     static_cast<long long>(runs_total));
                                         std::fflush(stdout);
                                         last_logged = runs_done;
                                       }
                                     });
  bar.Finish();
  if (!runs.ok()) {
    std::fprintf(stderr, "error: %s\n", runs.status().message().c_str());
    return 1;
  }
  if (report.preemptions > 0) {
    std::fprintf(stderr,
                 "warning: %lld requests were preempted and recomputed (prompt + output as one "
                 "prefill): raise --kv-cache-memory or lower --batch\n",
                 static_cast<long long>(report.preemptions));
  }
  const std::vector<eval::RulerOutcome>& dense = (*runs)[0];
  const std::vector<eval::RulerOutcome>& up = (*runs)[1];
  const bool timed = o.batch <= 1;

  const std::vector<eval::RulerCell> dense_cells = eval::AggregateRuler(*cases, dense);
  // pairs_by_setting[s - 1]: dense beside UniPrefill setting s (1 = default).
  std::vector<std::vector<CellPair>> pairs_by_setting;
  for (size_t s = 1; s < settings.size(); ++s) {
    const std::vector<eval::RulerCell> cells = eval::AggregateRuler(*cases, (*runs)[s]);
    std::vector<CellPair> pairs;
    for (size_t i = 0; i < dense_cells.size(); ++i) pairs.push_back({dense_cells[i], cells[i]});
    pairs_by_setting.push_back(std::move(pairs));
  }
  const std::vector<CellPair>& pairs = pairs_by_setting[0];

  std::printf("%-16s %7s %7s %9s %11s %7s %6s %10s %10s %8s\n", "task", "length", "samples",
              "dense %", "UniPrefill %", "delta", "keep", "dense s", "UniP s", "speedup");
  for (const CellPair& c : pairs) {
    std::printf("%-16s %7s %7d %9.1f %11.1f %+7.1f %6.3f %10.2f %10.2f %7.2fx\n",
                c.dense.task.c_str(), LengthLabel(c.dense.length).c_str(), c.dense.samples,
                c.dense.accuracy, c.uniprefill.accuracy, c.uniprefill.accuracy - c.dense.accuracy,
                c.uniprefill.keep_ratio, c.dense.prefill_s, c.uniprefill.prefill_s, c.speedup());
  }
  // Per length and setting: the bar verdict and means, printed and kept for the JSON.
  auto length_summary = [&](const std::vector<CellPair>& setting_pairs, int len,
                            const std::string& name) {
    std::vector<const CellPair*> cells;
    for (const CellPair& c : setting_pairs) {
      if (c.dense.length == len) cells.push_back(&c);
    }
    const BarVerdict v = CheckBar(cells);
    double ds = 0, us = 0, keep = 0;
    for (const CellPair* c : cells) {
      ds += c->dense.prefill_s;
      us += c->uniprefill.prefill_s;
      keep += c->uniprefill.keep_ratio / cells.size();
    }
    std::printf("%-16s %7s %7s %9.1f %11.1f %+7.1f %6.3f %10s %10s %7.2fx  %s\n", name.c_str(),
                LengthLabel(len).c_str(), "", v.mean_dense, v.mean_uniprefill,
                v.mean_uniprefill - v.mean_dense, keep, "", "", us > 0 ? ds / us : 0.0,
                v.ok ? "within bar" : ("OUTSIDE bar (worst: " + v.worst_task + ")").c_str());
    return std::make_pair(v.ok, nlohmann::json{{"length", len},
                                               {"dense_accuracy", v.mean_dense},
                                               {"uniprefill_accuracy", v.mean_uniprefill},
                                               {"keep_ratio", keep},
                                               {"prefill_speedup", us > 0 ? ds / us : 0.0},
                                               {"worst_task_drop", v.worst_task_drop},
                                               {"worst_task", v.worst_task},
                                               {"within_bar", v.ok}});
  };
  nlohmann::json per_length = nlohmann::json::array();
  bool all_ok = true;
  for (int len : *lengths) {
    auto [ok, row] = length_summary(pairs, len, "average");
    all_ok &= ok;
    nlohmann::json fixed = nlohmann::json::array();
    for (size_t s = 2; s < settings.size(); ++s) {
      auto [fixed_ok, fixed_row] =
          length_summary(pairs_by_setting[s - 1], len, "  " + settings[s].name);
      fixed_row["target_keep_ratio"] = *settings[s].options->keep_ratio;
      fixed.push_back(fixed_row);
    }
    if (!fixed.empty()) row["fixed_ratio"] = fixed;
    per_length.push_back(row);
  }
  std::printf("bar (mean within 1 point of dense; within 3 on tasks where dense > 20): %s%s\n",
              all_ok ? "met at every length" : "NOT met",
              settings.size() > 2 ? " with the default settings" : "");
  if (!timed) {
    std::printf("(--batch %d: prefill times are not measured; bench-prefill measures speedups)\n",
                o.batch);
  }

  if (!o.output.empty()) {
    nlohmann::json cells = nlohmann::json::array();
    for (size_t i = 0; i < pairs.size(); ++i) {
      const CellPair& c = pairs[i];
      nlohmann::json cell = {
          {"task", c.dense.task},
          {"length", c.dense.length},
          {"samples", c.dense.samples},
          {"dense", {{"accuracy", c.dense.accuracy}, {"prefill_s", c.dense.prefill_s}}},
          {"uniprefill",
           {{"accuracy", c.uniprefill.accuracy},
            {"prefill_s", c.uniprefill.prefill_s},
            {"keep_ratio", c.uniprefill.keep_ratio}}},
          {"prefill_speedup", c.speedup()}};
      nlohmann::json fixed = nlohmann::json::array();
      for (size_t s = 2; s < settings.size(); ++s) {
        const CellPair& f = pairs_by_setting[s - 1][i];
        fixed.push_back({{"target_keep_ratio", *settings[s].options->keep_ratio},
                         {"accuracy", f.uniprefill.accuracy},
                         {"prefill_s", f.uniprefill.prefill_s},
                         {"keep_ratio", f.uniprefill.keep_ratio},
                         {"prefill_speedup", f.speedup()}});
      }
      if (!fixed.empty()) cell["fixed_ratio"] = fixed;
      cells.push_back(cell);
    }
    auto kept_json = [](const eval::RulerOutcome& r) {
      nlohmann::json kept = nlohmann::json::array();
      for (const KeptTokensInfo& k : r.kept) {
        kept.push_back({{"layer", k.layer}, {"kept", k.kept}, {"alive", k.alive}});
      }
      return kept;
    };
    nlohmann::json samples = nlohmann::json::array();
    for (size_t i = 0; i < cases->size(); ++i) {
      const eval::RulerCase& c = (*cases)[i];
      nlohmann::json sample = {{"task", c.sample.task},
                               {"length", c.sample.target_tokens},
                               {"index", c.sample_index},
                               {"prompt_tokens", c.ids.size()},
                               {"references", c.sample.references},
                               {"dense",
                                {{"score", dense[i].score},
                                 {"prefill_s", dense[i].prefill_s},
                                 {"prediction", dense[i].prediction}}},
                               {"uniprefill",
                                {{"score", up[i].score},
                                 {"prefill_s", up[i].prefill_s},
                                 {"keep_ratio", up[i].keep_ratio},
                                 {"kept", kept_json(up[i])},
                                 {"prediction", up[i].prediction}}}};
      nlohmann::json fixed = nlohmann::json::array();
      for (size_t s = 2; s < settings.size(); ++s) {
        const eval::RulerOutcome& r = (*runs)[s][i];
        fixed.push_back({{"target_keep_ratio", *settings[s].options->keep_ratio},
                         {"score", r.score},
                         {"prefill_s", r.prefill_s},
                         {"keep_ratio", r.keep_ratio},
                         {"kept", kept_json(r)},
                         {"prediction", r.prediction}});
      }
      if (!fixed.empty()) sample["fixed_ratio"] = fixed;
      samples.push_back(sample);
    }
    nlohmann::json fixed_settings = nlohmann::json::array();
    for (size_t s = 2; s < settings.size(); ++s) {
      fixed_settings.push_back(
          {{"name", settings[s].name},
           {"target_keep_ratio", *settings[s].options->keep_ratio},
           {"description", *engine.DescribeUniPrefillOptions(*settings[s].options)}});
    }
    nlohmann::json j = {{"command", "eval ruler"},
                        {"date", UtcNow()},
                        {"model", engine.model_description()},
                        {"uniprefill", engine.uniprefill_description()},
                        {"fixed_ratio_settings", fixed_settings},
                        {"threads", engine.threads()},
                        {"batch", o.batch},
                        {"prefill_timed", timed},
                        {"preemptions", report.preemptions},
                        {"seed", o.seed},
                        {"samples_per_cell", o.samples},
                        {"tasks", tasks},
                        {"lengths", *lengths},
                        {"per_length", per_length},
                        {"cells", cells},
                        {"samples", samples}};
    if (OwnsReports(engine) && !WriteJsonFile(o.output, j, "--output")) return 1;
  }
  if (!o.plot.empty() && OwnsReports(engine) && !WritePlot(o.plot, pairs, tasks, *lengths,
                                    "RULER: dense vs UniPrefill, " + engine.model_name() + " (" +
                                        std::to_string(o.samples) + " samples per point)")) {
    return 1;
  }
  return 0;
}

}  // namespace uniprefill::cli
