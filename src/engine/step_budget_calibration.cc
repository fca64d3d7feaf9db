// BatchEngine::CalibrateStepBudget: serve's CPU step budget from the machine's measured pace
// (include/uniprefill/batch_engine.h). A fixed budget suits one machine: 8192 rows a step is a
// fraction of a second on a GPU and tens of seconds on a 2-core VM, where every decode beside a
// long prefill then waits that long for its next token.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/engine_impl.h"
#include "model/model_config.h"
#include "model/segment_cost.h"
#include "model/window_keys.h"
#include "uniprefill/batch_engine.h"

namespace uniprefill {
namespace {

constexpr int kMinBudget = 32;   // below this a chunk is mostly per-step overhead
constexpr int kSmallRows = 32;   // the first timed forward
constexpr int kBudgetStep = 16;  // budgets are multiples of this (the CPU's row tiles)

// Seconds of the fastest of `timed` dense forwards of `rows` random tokens, each on a fresh
// cache, after `warmup` untimed ones; the last row's logits are computed (the LM head runs, as
// in a served step with decodes).
Result<double> TimeForward(Model& model, DeviceContext& ctx, const UniPrefillConfig& dense,
                           int rows, int warmup, int timed) {
  const int vocab = model.config().vocab_size;
  std::mt19937 rng(static_cast<uint32_t>(rows));
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  std::vector<int32_t> ids(rows);
  for (int32_t& id : ids) id = token(rng);
  std::vector<float> logits(vocab);
  double best = 0;
  for (int i = 0; i < warmup + timed; ++i) {
    std::unique_ptr<SequenceCache> cache = model.NewCache(rows);
    SequenceStep step{cache.get(), ids, logits.data(), nullptr};
    const auto start = std::chrono::steady_clock::now();
    UP_RETURN_IF_ERROR(model.ForwardBatch(ctx, std::span<const SequenceStep>(&step, 1), dense));
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i >= warmup && (best == 0 || s < best)) best = s;
  }
  return best;
}

// A forward's seconds as fixed + per_row * rows, the line through two timed forwards; a line
// that does not rise or starts below 0 (timing noise, or one point) is read as the larger
// forward's own time per row.
struct StepLine {
  double fixed = 0, per_row = 0;
  double Seconds(int rows) const { return fixed + per_row * rows; }
};
StepLine FitStepLine(int small_rows, double small_s, int large_rows, double large_s) {
  StepLine line;
  if (large_rows > small_rows) {
    line.per_row = (large_s - small_s) / (large_rows - small_rows);
    line.fixed = small_s - line.per_row * small_rows;
  }
  if (!(line.per_row > 0) || line.fixed < 0) {
    line.per_row = large_s / std::max(1, large_rows);
    line.fixed = 0;
  }
  return line;
}

// Attention a forward of `rows` rows after `prefix` cached rows does beyond the same rows'
// forward on a fresh cache (the line's), in rows of the budget at the model's own prices (cost:
// its one segment's SegmentCost, so the slowdown measured is of what the scheduler prices): every
// priced full-attention key rows x prefix more (query, key) pairs, every sliding window the pairs
// it adds.
double ExtraAttentionRows(const SegmentCost& cost, int prefix, int rows) {
  return cost.key_cost * double(rows) * prefix +
         cost.window_key_cost *
             (WindowKeys(prefix, rows, cost.window) - WindowKeys(0, rows, cost.window));
}

// Seconds of two forwards of `rows` rows on one cache after `prefix` untimed rows (a prefill):
// the first attends prefix cached rows, the second prefix + rows.
Result<double> TimeDeepForwards(Model& model, DeviceContext& ctx, const UniPrefillConfig& dense,
                                int prefix, int rows) {
  const int vocab = model.config().vocab_size;
  std::mt19937 rng(static_cast<uint32_t>(prefix + rows));
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  std::vector<int32_t> ids(prefix + 2 * rows);
  for (int32_t& id : ids) id = token(rng);
  std::vector<float> logits(vocab);
  std::unique_ptr<SequenceCache> cache = model.NewCache(prefix + 2 * rows);
  const std::span<const int32_t> all(ids);
  SequenceStep fill{cache.get(), all.subspan(0, prefix), logits.data(), nullptr};
  UP_RETURN_IF_ERROR(model.ForwardBatch(ctx, std::span<const SequenceStep>(&fill, 1), dense));
  double seconds = 0;
  for (int i = 0; i < 2; ++i) {
    SequenceStep step{cache.get(), all.subspan(prefix + i * rows, rows), logits.data(), nullptr};
    const auto start = std::chrono::steady_clock::now();
    UP_RETURN_IF_ERROR(model.ForwardBatch(ctx, std::span<const SequenceStep>(&step, 1), dense));
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return seconds;
}

}  // namespace

double AttentionSlowdownFromTimings(double excess_s, double attention_rows,
                                    double seconds_per_row) {
  if (!(attention_rows > 0) || !(seconds_per_row > 0)) return 1.0;
  return std::clamp(excess_s / (attention_rows * seconds_per_row), 0.5, 8.0);
}

int StepBudgetFromTimings(int small_rows, double small_s, int large_rows, double large_s,
                          double target_step_s, int max_budget) {
  const StepLine line = FitStepLine(small_rows, small_s, large_rows, large_s);
  const int cap = std::max(kMinBudget, max_budget);
  const double rows = line.per_row > 0 ? (target_step_s - line.fixed) / line.per_row : double(cap);
  const int budget =
      static_cast<int>(std::clamp(rows, 0.0, double(cap))) / kBudgetStep * kBudgetStep;
  return std::clamp(budget, kMinBudget, cap);
}

Result<StepBudgetCalibration> BatchEngine::CalibrateStepBudget(Engine& engine, double target_step_s,
                                                               int max_budget,
                                                               bool measure_attention) {
  if (!(target_step_s > 0 && target_step_s <= 60)) {
    return InvalidArgument("the step time target must be in (0, 60] seconds (got " +
                           std::to_string(target_step_s) + ")");
  }
  if (max_budget < kMinBudget) {
    return InvalidArgument("a calibrated step budget needs a cap of at least " +
                           std::to_string(kMinBudget) + " tokens (got " +
                           std::to_string(max_budget) + ")");
  }
  Engine::Impl& core = *engine.impl_;
  if (core.model->device() != Device::kCpu) {
    return Unimplemented(
        "the step budget is calibrated for host models only; give "
        "--max-batched-tokens for a device model");
  }
  if (core.comm != nullptr && core.comm->world_size() > 1) {
    return Unimplemented(
        "the step budget is not calibrated under tensor parallelism "
        "(every rank would have to run the forwards); give "
        "--max-batched-tokens");
  }
  UniPrefillConfig dense = core.uniprefill;
  dense.enabled = false;
  const auto time_forward = [&](int rows, int warmup, int timed) {
    return TimeForward(*core.model, *core.ctx, dense, rows, warmup, timed);
  };
  const auto start = std::chrono::steady_clock::now();
  StepBudgetCalibration c;
  // Forwards run on fresh caches of their rows: within the context.
  const int most_rows = std::max(1, core.context_size - 1);
  c.small_rows = std::min({kSmallRows, max_budget, most_rows});
  UP_ASSIGN_OR_RETURN(c.small_s, time_forward(c.small_rows, /*warmup=*/1, /*timed=*/2));
  c.large_rows = c.small_rows;
  c.large_s = c.small_s;
  if (c.small_s < target_step_s / 4) {
    // The second size near half the budget the first predicts: long enough for the cost per
    // row to show, short enough that calibrating costs about one target step. (A machine where
    // the small forward alone takes a good part of the target gets the smallest budgets anyway.)
    const int guess = StepBudgetFromTimings(c.small_rows, c.small_s, c.small_rows, c.small_s,
                                            target_step_s, max_budget);
    c.large_rows =
        std::min(std::max(guess / 2 / kBudgetStep * kBudgetStep, 2 * c.small_rows), most_rows);
    if (c.large_rows > c.small_rows) {
      UP_ASSIGN_OR_RETURN(c.large_s, time_forward(c.large_rows, /*warmup=*/1, /*timed=*/1));
    } else {
      c.large_rows = c.small_rows;
    }
  }
  c.max_batched_tokens = StepBudgetFromTimings(c.small_rows, c.small_s, c.large_rows, c.large_s,
                                               target_step_s, max_budget);
  const StepLine line = FitStepLine(c.small_rows, c.small_s, c.large_rows, c.large_s);
  c.predicted_step_s = line.Seconds(c.max_batched_tokens);
  c.line_fixed_s = line.fixed;
  c.line_s_per_row = line.per_row;
  // The attention's price: forwards of the larger size over a cached prefix whose prefill takes
  // about four target steps (at least as deep as the rows, at most 4096), where the context has
  // room; their time over the line's is the attention over the prefix. (Deep enough that the
  // full-attention layers' keys, not only the sliding windows', show: on Gemma 3 270M at 0.5 s
  // on 2 cores ~1900 keys against windows of 512.)
  // (What is priced: since the last layer attends only each request's last row, a model whose one
  // full-attention layer is the last prices its sliding windows' keys only.)
  const std::vector<SegmentCost> priced = core.model->SegmentCosts({});
  const bool keys_priced =
      !priced.empty() && (priced[0].key_cost > 0 || priced[0].window_key_cost > 0);
  // The larger forward's rows (a quarter of the context at most, so that a prefix fits).
  const int rows = std::min(c.large_rows, (core.context_size - 1) / 4);
  const double prefill_rows =
      line.per_row > 0 ? std::max(0.0, 4 * target_step_s - line.fixed) / line.per_row : 0.0;
  const int prefix = std::min({core.context_size - 1 - 2 * rows, 4096,
                               static_cast<int>(std::min(prefill_rows, 4096.0))}) /
                     kBudgetStep * kBudgetStep;
  if (measure_attention && keys_priced && rows >= kBudgetStep && prefix >= rows) {
    UP_ASSIGN_OR_RETURN(c.deep_s, TimeDeepForwards(*core.model, *core.ctx, dense, prefix, rows));
    c.deep_prefix = prefix;
    c.deep_rows = rows;
    c.attention_rows = ExtraAttentionRows(priced[0], prefix, rows) +
                       ExtraAttentionRows(priced[0], prefix + rows, rows);
    c.deep_excess_s = c.deep_s - 2 * line.Seconds(rows);
    c.attention_slowdown =
        AttentionSlowdownFromTimings(c.deep_excess_s, c.attention_rows, line.per_row);
  }
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return c;
}

}  // namespace uniprefill
