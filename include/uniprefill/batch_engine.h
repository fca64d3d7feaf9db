// BatchEngine: continuous batching over one Engine's model, on its own thread.
//
// Requests are submitted from any thread (an HTTP handler, a benchmark); the engine thread runs
// steps: the Scheduler (engine/scheduler.h) decides which requests run (decodes of running requests
// plus whole prefills of admitted ones, under --max-batched-tokens and --kv-cache-memory), one
// Model::ForwardBatch computes them together over a paged KV cache (kv/paged_sequence_cache.h),
// and each request samples its next token. Each request's progress is reported through its
// callback: new text (stop-string safe, the same text Engine::Generate returns), new tokens, and a
// final update with the finish reason and usage.
//
// Threading: Submit, Cancel and Metrics never wait for a step (they take a short lock). Callbacks
// run on the engine thread and must not block: copy the update into your own queue. After the final
// update (finished == true) a request's callback is never called again and is destroyed.
//
// UniPrefill per request: SamplingParams::uniprefill toggles it; SamplingParams::uniprefill_options
// may override the selection (mode, top_p, keep_ratio, block_size, sink, last_n) but not the drop
// layers or the window mode, which fix the KV layout shared by every request (InvalidArgument).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "uniprefill/engine.h"

namespace uniprefill {

struct ServingOptions {
  int64_t kv_cache_memory = int64_t{4} << 30;  // bytes for KV blocks + linear-attention state
  int kv_block_tokens = 16;                     // alive indices per KV block
  int max_num_seqs = 256;                       // requests running at once
  int max_batched_tokens = 8192;                // tokens of all requests in one step
  // Cut prefills into chunks that fill what the running decodes leave of each step's budget: dense
  // ones through every layer, UniPrefill ones segment-wise (Model::supports_segment_chunks: the
  // CPU and CUDA backends). engine/scheduler.h, docs/design.md section 2.
  bool chunked_prefill = true;
  // Charge prefill chunks for the cached keys they attend (SchedulerConfig::attention_key_cost
  // from Model::AttentionKeyCost), so steps deep into a long prompt stay as short as early ones,
  // and a segment-wise chunk for its segment's layers only (SchedulerConfig::segment_costs);
  // false: the budget counts rows only.
  bool budget_counts_attention = true;
  // Dense prefills that do not fit a step run segment-wise too, at the UniPrefill drop layers'
  // segment boundaries, every row kept (SchedulerConfig::dense_segment_chunks): a chunk deep in a
  // long prompt then runs a segment's layers on several times the rows. Needs chunked_prefill and
  // UniPrefill's drop layers on the server (the cache's segments). Off by default: served on an
  // H100 (33rd session, 8B shape, budget 2048) it was slower than all-layer chunks (the 130K
  // prompt among 16 shorts 1.184x whole against 1.164x; 4 x 32K 1.228x against 1.159x): beside
  // decodes, every layer a chunk does not run still streams its weights for the decodes alone.
  bool dense_segment_chunks = false;
  // A step with no decodes in it spends this budget instead, when larger (--prefill-only-tokens;
  // SchedulerConfig::prefill_only_tokens): a long prompt alone runs in larger chunks. 0: off.
  int prefill_only_tokens = 0;
  // The cached keys' price (SchedulerConfig::attention_key_cost, each segment's key_cost) times
  // this: how many times longer one attention FLOP takes than one FLOP of the linear layers on
  // this machine, on top of what the backend measured itself (the CUDA backend's PrepareServing;
  // the CPU backend prices by FLOPs). serve sets the CPU's from CalibrateStepBudget, so a step
  // deep in a long prompt lasts about as long as a shallow one. 1: by FLOPs. In (0, 100].
  double attention_slowdown = 1.0;
  // CUDA models: choose each request's next token on the GPU (only ids travel back) when its
  // sampling has no penalties and asks for no top_logprobs; false: every token from host logits.
  bool device_sampling = true;
};

// The step budgets `serve` gives a device ("cpu", "cuda") when the user sets neither flag: the
// CPU 8192 tokens a step (vLLM's default on large GPUs; serve measures a CPU budget below this cap
// instead unless --target-step-ms 0, CalibrateStepBudget) and no prefill-only budget; CUDA 2048,
// and 8192 for steps without decodes: the configuration issue 18's served goals were measured
// with on an H200 (8B shape, 4 x 32K: ITL p99 ~50 ms at TTFT 1.13-1.14x whole, where a step
// deep in a long prompt ran ~180 ms at 8192).
struct StepBudgets {
  int max_batched_tokens = 8192;
  int prefill_only_tokens = 0;
};
StepBudgets DefaultStepBudgets(const std::string& device);

// What BatchEngine::CalibrateStepBudget timed and chose: the fastest of each size's timed
// forwards (fresh caches, the last row's logits computed, as a step with decodes does).
struct StepBudgetCalibration {
  int max_batched_tokens = 0;  // the budget chosen
  int small_rows = 0, large_rows = 0;
  double small_s = 0, large_s = 0;
  double predicted_step_s = 0;  // a step of the chosen budget, on the line through the two
  // Two forwards of deep_rows rows after deep_prefix (then deep_prefix + deep_rows) cached rows,
  // deep_s seconds together: their time over the line's is the attention over the cached rows,
  // and attention_slowdown what it took over its FLOPs' time at the line's rate per row
  // (AttentionSlowdownFromTimings). deep_prefix 0: not measured (no full or sliding attention,
  // or no room in the context), slowdown 1.
  int deep_prefix = 0, deep_rows = 0;
  double deep_s = 0;
  double line_fixed_s = 0, line_s_per_row = 0;  // the line through the two timed sizes
  double deep_excess_s = 0;   // deep_s less two of the line's forwards of deep_rows
  double attention_rows = 0;  // their extra attention FLOPs in rows of the linear layers' FLOPs
  double attention_slowdown = 1.0;
  double seconds = 0;  // the calibration's wall time, warm-up forwards and the prefix included
};

// How many times longer the attention over cached keys took than its FLOPs at the linear
// layers' rate: excess_s (the deep forwards' seconds over the line's for their rows) over
// attention_rows (their extra attention FLOPs in rows of the linear layers' FLOPs) times
// seconds_per_row (the line's slope). Held within [0.5, 8] (a noisy or disturbed measurement must
// neither flood nor starve the steps); 1 where nothing was measured (attention_rows or
// seconds_per_row not positive).
double AttentionSlowdownFromTimings(double excess_s, double attention_rows, double seconds_per_row);

// The step budget whose forward takes about target_step_s on the line through two timed
// forwards (small_rows in small_s, large_rows in large_s: a fixed part plus a cost per row),
// rounded down to a multiple of 16 and held within [32, max(32, max_budget)]. A line that does
// not rise or starts below 0 s (timing noise; or one point, small_rows == large_rows) is read
// as the larger forward's own time per row.
int StepBudgetFromTimings(int small_rows, double small_s, int large_rows, double large_s,
                          double target_step_s, int max_budget);

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;  // log-softmax of the raw logits (before temperature and penalties)
};

// One sampled token; logprob and top are filled when the request asked for logprobs.
struct SampledToken {
  int32_t id = 0;
  float logprob = 0;
  std::vector<TokenLogprob> top;  // the top_logprobs most likely tokens, most likely first
};

struct RequestUsage {
  int prompt_tokens = 0;
  int completion_tokens = 0;  // tokens in the output (EOS and stop token ids excluded)
  double queue_s = 0;         // submission -> first scheduled
  double ttft_s = 0;          // submission -> first token sampled
  double e2e_s = 0;           // submission -> finished
  int preemptions = 0;
  // UniPrefill: tokens alive and kept at each drop layer of the (last) prefill; empty when dense.
  std::vector<KeptTokensInfo> kept;
};

struct RequestUpdate {
  int64_t id = 0;
  std::string text;                  // text final since the last update (may be empty)
  std::vector<SampledToken> tokens;  // output tokens since the last update
  bool finished = false;
  // Set when finished: "stop" (EOS, end of turn, stop token id or string), "length" (max_tokens
  // or context), "abort" (Cancel, shutdown) or "error" (then `error` says what failed).
  std::string finish_reason;
  std::string error;
  RequestUsage usage;  // complete when finished; prompt_tokens and ttft_s once known
};

using UpdateCallback = std::function<void(const RequestUpdate&)>;

// Prometheus-style histogram: counts[i] observations <= bounds[i]; the last count is +Inf.
struct Histogram {
  std::vector<double> bounds;
  std::vector<int64_t> counts;  // bounds.size() + 1, non-cumulative
  double sum = 0;
  int64_t count = 0;
  static Histogram WithBounds(std::vector<double> bounds);
  void Observe(double value);
};

// A consistent snapshot of the engine's state and counters.
struct ServingMetrics {
  int waiting = 0;   // queued (preempted ones included)
  int running = 0;   // holding KV
  int64_t requests_submitted = 0;
  int64_t requests_finished_stop = 0, requests_finished_length = 0, requests_aborted = 0,
          requests_failed = 0;
  int64_t prompt_tokens = 0;      // prefilled tokens (recomputed ones included)
  int64_t generation_tokens = 0;  // sampled tokens
  int64_t steps = 0;
  int64_t mixed_steps = 0;  // steps that ran prefills and decodes together
  // Prefill chunks that ran one segment's layers (segment-wise), dense ones among them.
  int64_t segment_chunks = 0, dense_segment_chunks = 0;
  int64_t preemptions = 0;
  double generation_tokens_per_s = 0;  // over the last ~10 s
  // The step budgets served with (ServingOptions; serve measures the CPU's at start).
  int max_batched_tokens = 0, prefill_only_tokens = 0;
  double attention_slowdown = 1;  // ServingOptions::attention_slowdown, as served
  // KV memory (KvBlockManager::Usage): blocks used now and what dense prefills would have used.
  int kv_blocks_total = 0, kv_blocks_used = 0;
  int64_t kv_block_bytes = 0, kv_bytes_used = 0, kv_bytes_dense = 0, kv_bytes_saved = 0;
  // UniPrefill: tokens alive at drop layers and kept by them, summed over prefills.
  int64_t uniprefill_alive_tokens = 0, uniprefill_kept_tokens = 0;
  // Over the prefills that selected: tokens they started with (alive at their first drop layer) and
  // tokens their last drop layer kept; their ratio is the aggregate KeepRatio (engine.h).
  int64_t uniprefill_prefill_tokens = 0, uniprefill_prefill_kept_tokens = 0;
  Histogram ttft_s, inter_token_s, e2e_s;
};

class BatchEngine {
 public:
  // Sizes the KV pool from `options` for `engine`'s model and starts the engine thread. The engine
  // must outlive the BatchEngine and must not run Generate meanwhile.
  // Under --tensor-parallel (CPU or GPU) only rank 0 starts a BatchEngine: its scheduler and
  // sampler (on the device for a GPU model) decide every step and broadcast it
  // (engine/rank_plan.h: the decode inputs are the tokens it chose); the other ranks call Follow.
  static Result<std::unique_ptr<BatchEngine>> Start(Engine& engine, const ServingOptions& options);
  // Ranks other than 0 of a tensor-parallel job: sizes the same KV pool as rank 0 and runs each
  // step rank 0 broadcasts, on this rank's shard, until rank 0 stops (OK). Unavailable when rank
  // 0 or another rank died or hung (the communicator's timeout), so the rank can exit with an
  // error instead of hanging.
  static Status Follow(Engine& engine, const ServingOptions& options);
  // A host model's step budget from this machine's measured pace (serve's default on the CPU,
  // where one budget can not suit a 2-core VM and a 64-core server alike): times dense forwards
  // of 32 rows and of about half the budget that timing predicts (each after an untimed one:
  // a process's first forwards run slower), and picks the budget whose step takes about
  // target_step_s (StepBudgetFromTimings), at most max_budget. A step then stalls the decodes
  // beside a long prefill for about that long: with the default 0.5 s, ITL p99 stays under 1 s.
  // Then two forwards over a cached prefix (prefilled untimed, about four target steps long) give
  // the attention's price (StepBudgetCalibration::attention_slowdown, for
  // ServingOptions::attention_slowdown): FLOPs alone priced a 16K-deep step on a 2-core CPU at
  // 500 ms where it took 650-740.
  // InvalidArgument for a target outside (0, 60] s or a max_budget below 32; Unimplemented for
  // a device model or a tensor-parallel engine (every rank would have to run the forwards).
  // measure_attention false: the budget alone (the slowdown stays 1).
  static Result<StepBudgetCalibration> CalibrateStepBudget(Engine& engine, double target_step_s,
                                                           int max_budget,
                                                           bool measure_attention = true);
  // Aborts every unfinished request (final update "abort") and joins the thread.
  ~BatchEngine();
  // The same as the destructor, with what went wrong: under tensor parallelism telling the other
  // ranks to stop may fail, and a failure seen earlier (Health) is returned again.
  Status Stop();
  // OK while serving; under tensor parallelism, Unavailable once a collective failed (a rank died
  // or hung): every request then ended with finish_reason "error" and Submit refuses.
  Status Health() const;

  // Checks the request now (prompt not empty, ids inside the vocabulary, sampling parameters,
  // prompt + max_tokens within the context and the KV pool) and queues it. Errors:
  // InvalidArgument (bad parameters), OutOfRange (too long for the context or the KV memory),
  // Unavailable (shutting down). On success the callback will receive updates, the last final.
  Result<int64_t> Submit(std::vector<int32_t> prompt, const SamplingParams& params,
                         UpdateCallback on_update);
  // Ends a request early (a client went away): its KV is freed at the next step and its final
  // update says "abort". Unknown or finished ids are ignored.
  void Cancel(int64_t id);

  ServingMetrics Metrics() const;
  const ServingOptions& options() const;
  Engine& engine() const;
  // Seconds Start spent preparing the model for the step budget (Model::PrepareServing: a GPU
  // model builds its attention graphs there, so no served step waits for one).
  double prepare_seconds() const;

 private:
  struct Impl;
  explicit BatchEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace uniprefill
