// BatchEngine: the engine thread's step loop (schedule -> one batched forward -> sample -> report)
// over a paged KV cache. See uniprefill/batch_engine.h for the contract.
#include "uniprefill/batch_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "engine/engine_impl.h"
#include "engine/rank_plan.h"
#include "engine/scheduler.h"
#include "engine/serving_kv.h"
#include "kv/kv_arena.h"
#include "kv/kv_block_manager.h"
#include "kv/paged_sequence_cache.h"

namespace uniprefill {

using namespace engine_internal;  // NOLINT: shared request helpers of Engine and BatchEngine

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Latency buckets (seconds) for TTFT / end-to-end and for inter-token gaps.
std::vector<double> LatencyBounds() {
  return {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320};
}
std::vector<double> InterTokenBounds() {
  return {0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2.5, 5};
}

// The sampled token's logprob and the `top` most likely tokens, from raw logits f32 [vocab].
SampledToken WithLogprobs(int32_t id, std::span<const float> logits, int top) {
  SampledToken t;
  t.id = id;
  float max = logits[0];
  for (float l : logits) max = std::max(max, l);
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max));
  const float log_z = max + static_cast<float>(std::log(sum));
  t.logprob = logits[id] - log_z;
  if (top > 0) {
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    const size_t n = std::min<size_t>(top, ids.size());
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    });
    for (size_t i = 0; i < n; ++i) t.top.push_back({ids[i], logits[ids[i]] - log_z});
  }
  return t;
}

}  // namespace

Histogram Histogram::WithBounds(std::vector<double> bounds) {
  Histogram h;
  h.bounds = std::move(bounds);
  h.counts.assign(h.bounds.size() + 1, 0);
  return h;
}

void Histogram::Observe(double value) {
  size_t i = std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin();
  ++counts[i];
  sum += value;
  ++count;
}

struct BatchEngine::Impl {
  // A submitted request on its way to the engine thread.
  struct Pending {
    int64_t id = 0;
    std::vector<int32_t> prompt;
    SamplingParams params;
    UniPrefillConfig selection;
    UpdateCallback on_update;
    Clock::time_point submitted;
  };

  // A request the engine thread is running (scheduler id -> this).
  struct Live {
    int64_t id = 0;
    std::vector<int32_t> prompt;
    SamplingParams params;
    UniPrefillConfig selection;
    UpdateCallback on_update;
    Clock::time_point submitted, last_token;
    bool scheduled = false, first_token = false;
    Sampler sampler;
    std::string text;      // final text not yet reported
    std::unique_ptr<TextOutput> out;
    std::vector<int32_t> sampled;  // every sampled token (the prefill of a recompute feeds them)
    std::vector<SampledToken> unreported;
    std::vector<int32_t> prefill;  // the prefill being computed: prompt + tokens sampled so far
    std::vector<int32_t> feed;     // this step's input ids
    std::vector<float> logits;     // f32 [vocab]
    SegmentChunk chunk;            // this step's segment-wise chunk (when the plan's is one)
    StepSampling device;           // this step's on-device choice (when `on_device`)
    int32_t device_token = -1;
    float device_logprob = 0.0f;
    bool on_device = false;
    std::vector<KeptTokens> kept;  // of the latest prefill
    std::unique_ptr<SequenceCache> cache;
    RequestUsage usage;
    explicit Live(const SamplerConfig& c) : sampler(c) {}
  };

  Impl(Engine& e, const ServingOptions& o) : engine(e), core(*e.impl_), options(o) {}

  Engine& engine;
  Engine::Impl& core;
  ServingOptions options;
  CacheLayout layout;
  std::optional<KvBlockManager> capacity;  // an empty manager: Submit's "could it ever fit" check
  std::unique_ptr<KvArena> arena;
  std::optional<Scheduler> scheduler;  // engine thread only

  // Shared with submitting threads.
  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<Pending> inbox;
  std::vector<int64_t> cancels;
  bool stopping = false;
  int64_t next_id = 0;
  ServingMetrics metrics;  // under mu; refreshed by the engine thread after each step

  // Engine thread only.
  std::unordered_map<RequestId, std::unique_ptr<Live>> live;
  std::unordered_map<int64_t, RequestId> by_public_id;
  std::deque<std::pair<Clock::time_point, int64_t>> recent_tokens;  // (step end, tokens sampled)
  ServingMetrics counters;  // the engine thread's running totals, copied into `metrics`
  double prepare_s = 0;      // Model::PrepareServing's wall time at Start
  std::thread thread;

  // Tensor parallel (rank 0 of several): the ranks that run each step's plan (rank_plan.h), the
  // requests whose caches they hold, and how long an idle engine waits before telling them it is
  // alive (the followers' receive has the collective timeout, so silence would look like death).
  dist::Communicator* followers = nullptr;
  std::unordered_set<RequestId> follower_held;
  std::chrono::duration<double> heartbeat{1.0};
  // Why the engine stopped serving (a rank died or hung); under mu, OK while healthy.
  Status failure;
  bool broken = false;  // engine thread: Fail() ran

  void Run();
  // Rank 0 under tensor parallelism: the plan the other ranks run for this step.
  RankPlan FollowerPlan(const StepPlan& plan, const std::vector<Live*>& step_live);
  // A failed collective: every request ends with the error, Submit refuses, the loop ends.
  void Fail(const Status& why);
  // Ends every request still in the inbox with `reason` and `error`; when `failed`, the engine's
  // failure becomes `error` first (under mu, so Submit refuses from then on) and each counts as
  // failed.
  void EndQueued(const std::string& reason, const std::string& error, bool failed);
  void Admit(Pending p);
  void RunStep();
  void Report(Live& l, bool finished, const std::string& reason, const std::string& error);
  void FinishAll(const std::string& reason, const std::string& error);
  void PublishMetrics();
};

BatchEngine::BatchEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<BatchEngine>> BatchEngine::Start(Engine& engine,
                                                        const ServingOptions& options) {
  if (options.max_batched_tokens < 1) {
    return InvalidArgument("--max-batched-tokens must be at least 1 (got " +
                           std::to_string(options.max_batched_tokens) + ")");
  }
  if (options.prefill_only_tokens < 0) {
    return InvalidArgument("--prefill-only-tokens must be 0 (off) or positive (got " +
                           std::to_string(options.prefill_only_tokens) + ")");
  }
  if (!(options.attention_slowdown > 0 && options.attention_slowdown <= 100)) {
    return InvalidArgument("the attention slowdown must be in (0, 100] (got " +
                           std::to_string(options.attention_slowdown) + ")");
  }
  Engine::Impl& core = *engine.impl_;
  const bool on_device = core.model->device() == Device::kCuda;
  dist::Communicator* comm = core.comm.get();
  if (comm != nullptr && comm->rank() != 0) {
    return InvalidArgument("rank " + std::to_string(comm->rank()) + " of a tensor-parallel "
                           "job runs rank 0's steps (BatchEngine::Follow), not a scheduler");
  }
  auto impl = std::make_unique<Impl>(engine, options);
  if (comm != nullptr) {
    // Every step's plan goes to the other ranks (none in a world of one, which still runs this
    // path: encoding, the broadcast, the heartbeat). Rank 0 alone samples, on the device or the
    // host; the tokens it chose reach the followers as the next step's decode inputs.
    impl->followers = comm;
    // A quarter of the collective timeout (at most 1 s): several heartbeats fit in one timeout.
    impl->heartbeat = std::chrono::duration<double>(std::min(1.0, core.comm_timeout_s / 4));
  }
  // Host models keep f32 K/V in a KvArena; a device model keeps bf16 K/V in its own pool, sized to
  // exactly the manager's blocks, so --kv-cache-memory is device memory there.
  UP_ASSIGN_OR_RETURN(ServingKv kv, SizeServingKv(*core.model, core.uniprefill, options));
  impl->layout = kv.layout;
  const KvCacheSpec& spec = kv.spec;
  const KvPoolSize& size = kv.size;
  impl->capacity.emplace(spec, size);
  if (on_device) {
    UP_ASSIGN_OR_RETURN(impl->prepare_s,
                        PrepareDeviceServing(*core.model, kv, options, core.context_size));
  } else {
    impl->arena = std::make_unique<KvArena>(impl->layout, size);
  }
  // UniPrefill prefills run segment-wise in chunks where the model can (the CPU backend today).
  const bool segment_chunks = options.chunked_prefill && core.model->supports_segment_chunks();
  // By name: a positional list put prefill_only_tokens into prefix_key_cost once that field
  // was added before it, and no server spent the prefill-only budget.
  SchedulerConfig sc;
  sc.max_batched_tokens = options.max_batched_tokens;
  sc.chunked_prefill = options.chunked_prefill;
  sc.segment_chunks = segment_chunks;
  sc.dense_segment_chunks = segment_chunks && options.dense_segment_chunks;
  sc.prefill_only_tokens = options.prefill_only_tokens;
  if (options.budget_counts_attention) {
    const std::vector<SegmentCost> whole = core.model->SegmentCosts({});
    if (!whole.empty()) {
      sc.attention_key_cost = whole[0].key_cost;
      sc.prefix_key_cost = whole[0].prefix_key_cost;
      sc.attention_window_key_cost = whole[0].window_key_cost;
      sc.attention_window = whole[0].window;
      sc.attention_query_tile = whole[0].query_tile_rows;
      sc.decode_key_cost = whole[0].decode_key_cost;
      sc.weight_floor_rows = whole[0].weight_floor_rows;
      sc.min_extra_chunk_rows = whole[0].min_extra_chunk_rows;
      sc.linear_row_tile = whole[0].linear_row_tile;
      sc.tile_overshoot = whole[0].tile_overshoot;
    }
    if (segment_chunks) {
      sc.segment_costs = core.model->SegmentCosts(core.uniprefill.active_drop_layers());
    }
    // What this machine's attention FLOPs take over the price the backend gave them.
    sc.attention_key_cost *= options.attention_slowdown;
    sc.attention_window_key_cost *= options.attention_slowdown;
    for (SegmentCost& c : sc.segment_costs) {
      c.key_cost *= options.attention_slowdown;
      c.window_key_cost *= options.attention_slowdown;
    }
  }
  impl->scheduler.emplace(std::move(sc), KvBlockManager(spec, size));
  ServingMetrics& m = impl->counters;
  m.ttft_s = Histogram::WithBounds(LatencyBounds());
  m.e2e_s = Histogram::WithBounds(LatencyBounds());
  m.inter_token_s = Histogram::WithBounds(InterTokenBounds());
  m.kv_blocks_total = size.num_blocks;
  m.max_batched_tokens = options.max_batched_tokens;
  m.prefill_only_tokens = options.prefill_only_tokens;
  m.attention_slowdown = options.attention_slowdown;
  m.kv_block_bytes = impl->scheduler->kv().block_bytes();
  impl->metrics = m;
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Run(); });
  return std::unique_ptr<BatchEngine>(new BatchEngine(std::move(impl)));
}

BatchEngine::~BatchEngine() { (void)Stop(); }

Status BatchEngine::Stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->failure;
}

Status BatchEngine::Health() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->failure;
}

const ServingOptions& BatchEngine::options() const { return impl_->options; }
double BatchEngine::prepare_seconds() const { return impl_->prepare_s; }
Engine& BatchEngine::engine() const { return impl_->engine; }

ServingMetrics BatchEngine::Metrics() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  ServingMetrics m = impl_->metrics;
  m.waiting += static_cast<int>(impl_->inbox.size());
  return m;
}

Result<int64_t> BatchEngine::Submit(std::vector<int32_t> prompt, const SamplingParams& params,
                                    UpdateCallback on_update) {
  Engine::Impl& core = impl_->core;
  const ModelConfig& mc = core.model->config();
  if (prompt.empty()) return InvalidArgument("the prompt is empty");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= mc.vocab_size) {
      return InvalidArgument("prompt token " + std::to_string(i) + " is " +
                             std::to_string(prompt[i]) + ", outside the vocabulary [0, " +
                             std::to_string(mc.vocab_size) + ")");
    }
  }
  if (params.max_tokens < 1) {
    return InvalidArgument("max_tokens must be at least 1 (got " +
                           std::to_string(params.max_tokens) + ")");
  }
  UP_RETURN_IF_ERROR(ValidateSamplingParams(params, mc.vocab_size));
  if (params.logprobs < -1 || params.logprobs > 20) {
    return InvalidArgument("logprobs must be between 0 and 20 (got " +
                           std::to_string(params.logprobs) + ")");
  }
  const int64_t total = static_cast<int64_t>(prompt.size()) + params.max_tokens;
  if (total > core.context_size) {
    return OutOfRange("this model's context holds " + std::to_string(core.context_size) +
                      " tokens, but the prompt has " + std::to_string(prompt.size()) +
                      " and max_tokens asks for " + std::to_string(params.max_tokens) +
                      " more; shorten the prompt or lower max_tokens");
  }
  // Per-request UniPrefill: selection parameters only (the drop layers and window mode fix the
  // KV layout every request shares).
  UniPrefillConfig selection = core.uniprefill;
  if (params.uniprefill_options) {
    const UniPrefillOptions& o = *params.uniprefill_options;
    if (o.drop_layers && *o.drop_layers != core.uniprefill.drop_layers) {
      return InvalidArgument("uniprefill.drop_layers cannot change per request on this server "
                             "(it serves drop layers " +
                             LayerListToString(core.uniprefill.drop_layers) +
                             "); restart it with --drop-layers");
    }
    UP_ASSIGN_OR_RETURN(selection, ApplyUniPrefillOptions(core.uniprefill, o, mc));
    if (selection.window_mode != core.uniprefill.window_mode) {
      return InvalidArgument("uniprefill.window cannot change per request on this server");
    }
  }
  const int64_t worst = total - 1;
  const int need = impl_->capacity->DenseBlocksFor(static_cast<int>(worst));
  if (need > impl_->capacity->num_blocks()) {
    return OutOfRange("the prompt (" + std::to_string(prompt.size()) + " tokens) plus max_tokens " +
                      std::to_string(params.max_tokens) + " needs " + std::to_string(need) +
                      " KV blocks but the whole KV cache holds " +
                      std::to_string(impl_->capacity->num_blocks()) +
                      "; raise --kv-cache-memory or send a shorter request");
  }
  Impl::Pending p;
  p.prompt = std::move(prompt);
  p.params = params;
  p.selection = selection;
  p.on_update = std::move(on_update);
  p.submitted = Clock::now();
  int64_t id;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!impl_->failure.ok()) return Unavailable("the engine stopped: " + impl_->failure.message());
    if (impl_->stopping) return Unavailable("the server is shutting down");
    id = p.id = impl_->next_id++;
    impl_->inbox.push_back(std::move(p));
    ++impl_->metrics.requests_submitted;
  }
  impl_->cv.notify_all();
  return id;
}

void BatchEngine::Cancel(int64_t id) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->cancels.push_back(id);
  }
  impl_->cv.notify_all();
}

void BatchEngine::Impl::Run() {
  for (;;) {
    std::deque<Pending> arrived;
    std::vector<int64_t> cancelled;
    {
      std::unique_lock<std::mutex> lock(mu);
      const auto ready = [&] {
        return stopping || !inbox.empty() || !cancels.empty() || scheduler->has_unfinished();
      };
      if (followers == nullptr) {
        cv.wait(lock, ready);
      } else if (!cv.wait_for(lock, heartbeat, ready)) {
        // Idle under tensor parallelism: the followers wait for the next plan with the
        // collective timeout, which then still catches a dead or hung rank 0 (and rank 0's next
        // broadcast catches a dead follower); a heartbeat keeps the wait short while no request
        // comes.
        lock.unlock();
        if (Status st = SendRankPlan(*followers, RankPlan{}); !st.ok()) return Fail(st);
        continue;
      }
      if (stopping) break;
      arrived.swap(inbox);
      cancelled.swap(cancels);
    }
    for (Pending& p : arrived) Admit(std::move(p));
    for (int64_t public_id : cancelled) {
      auto it = by_public_id.find(public_id);
      if (it != by_public_id.end()) (void)scheduler->Abort(it->second);
    }
    if (scheduler->has_unfinished()) RunStep();
    if (broken) return;  // Fail() ended every request
    PublishMetrics();
  }
  // Shutdown: every request still queued or running ends as aborted.
  EndQueued("abort", "", /*failed=*/false);
  FinishAll("abort", "");
  if (followers != nullptr) {
    RankPlan shutdown;
    shutdown.kind = RankPlanKind::kShutdown;
    if (Status st = SendRankPlan(*followers, shutdown); !st.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      failure = Unavailable("tensor parallel: telling the other ranks to stop: " + st.message());
    }
  }
}

void BatchEngine::Impl::EndQueued(const std::string& reason, const std::string& error,
                                   bool failed) {
  std::deque<Pending> left;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (failed) failure = Unavailable(error);
    left.swap(inbox);
  }
  for (Pending& p : left) {
    RequestUpdate u;
    u.id = p.id;
    u.finished = true;
    u.finish_reason = reason;
    u.error = error;
    u.usage.prompt_tokens = static_cast<int>(p.prompt.size());
    if (failed) ++counters.requests_failed;
    if (p.on_update) p.on_update(u);
  }
}

void BatchEngine::Impl::Fail(const Status& why) {
  const std::string message = "tensor parallel: " + why.message();
  broken = true;
  EndQueued("error", message, /*failed=*/true);
  counters.requests_failed += static_cast<int64_t>(live.size());
  FinishAll("error", message);
  PublishMetrics();
}

RankPlan BatchEngine::Impl::FollowerPlan(const StepPlan& plan,
                                         const std::vector<Live*>& step_live) {
  RankPlan out;
  out.kind = RankPlanKind::kStep;
  // Whatever left the KV manager since the last plan (finished, aborted, preempted) leaves the
  // followers' too; after this plan they hold exactly the running requests, as rank 0 does.
  const KvBlockManager& kv = scheduler->kv();
  for (RequestId id : follower_held) {
    if (!kv.Contains(id)) out.released.push_back(id);
  }
  std::sort(out.released.begin(), out.released.end());
  follower_held.clear();
  follower_held.insert(scheduler->running().begin(), scheduler->running().end());
  for (size_t i = 0; i < plan.requests.size(); ++i) {
    const ScheduledRequest& sr = plan.requests[i];
    const Live& l = *step_live[i];
    RankPlanRequest r;
    r.id = sr.id;
    r.is_prefill = sr.is_prefill;
    r.last_chunk = sr.last_chunk;
    r.allow_drop = sr.uniprefill;
    r.selection_enabled = l.selection.enabled;
    r.selection = l.selection.selection;
    if (sr.is_prefill && sr.chunk_begin == 0 && sr.segment <= 0) {  // RunStep makes a new cache
      r.reserve_tokens = kv.segment_tokens(sr.id, 0);
    }
    r.num_tokens = sr.num_tokens;
    r.chunk_begin = sr.chunk_begin;
    r.segment = sr.segment;
    r.segment_rows = sr.segment_rows;
    r.tokens = l.feed;
    out.requests.push_back(std::move(r));
  }
  return out;
}

void BatchEngine::Impl::Admit(Pending p) {
  RequestSpec spec;
  spec.prompt_tokens = static_cast<int>(p.prompt.size());
  spec.max_tokens = p.params.max_tokens;
  spec.uniprefill = p.params.uniprefill && p.selection.enabled;
  spec.selection_queries = p.selection.selection.last_n;
  Result<RequestId> sid = scheduler->Submit(spec);
  auto l = std::make_unique<Live>(ToSamplerConfig(p.params));
  l->id = p.id;
  l->usage.prompt_tokens = spec.prompt_tokens;
  l->on_update = std::move(p.on_update);
  if (!sid.ok()) {  // Submit checked the same limits; this is a safety net
    ++counters.requests_failed;
    Report(*l, true, "error", sid.status().message());
    return;
  }
  l->prompt = std::move(p.prompt);
  l->params = std::move(p.params);
  l->selection = std::move(p.selection);
  l->submitted = p.submitted;
  l->sampler.SetPrompt(l->prompt);
  l->out = std::make_unique<TextOutput>(*core.tokenizer, l->params.stop, nullptr, &l->text);
  l->logits.resize(core.model->config().vocab_size);
  by_public_id[l->id] = *sid;
  live.emplace(*sid, std::move(l));
}

void BatchEngine::Impl::Report(Live& l, bool finished, const std::string& reason,
                               const std::string& error) {
  RequestUpdate u;
  u.id = l.id;
  u.text.swap(l.text);
  u.tokens.swap(l.unreported);
  u.finished = finished;
  u.finish_reason = reason;
  u.error = error;
  u.usage = l.usage;
  if (l.on_update && (finished || !u.text.empty() || !u.tokens.empty())) l.on_update(u);
}

void BatchEngine::Impl::FinishAll(const std::string& reason, const std::string& error) {
  for (auto& [sid, l] : live) {
    (void)scheduler->Abort(sid);
    l->out->Finish();
    l->usage.e2e_s = Seconds(Clock::now() - l->submitted);
    Report(*l, true, reason, error);
  }
  live.clear();
  by_public_id.clear();
}

void BatchEngine::Impl::RunStep() {
  Scheduler& sched = *scheduler;
  Result<StepPlan> plan = sched.Schedule();
  if (!plan.ok()) {  // only when a step is already open: a bug; fail loudly but keep serving
    FinishAll("error", "scheduler: " + plan.status().message());
    return;
  }
  const Clock::time_point step_start = Clock::now();
  for (RequestId id : plan->preempted) {
    Live& l = *live.at(id);
    l.cache.reset();  // its blocks went back to the pool; it is recomputed when re-admitted
    ++l.usage.preemptions;
    ++counters.preemptions;
  }
  const Engine::Impl& c = core;
  std::vector<SequenceStep> steps;
  std::vector<Live*> step_live;
  bool any_prefill = false, any_decode = false;
  for (const ScheduledRequest& sr : plan->requests) {
    Live& l = *live.at(sr.id);
    if (!l.scheduled) {
      l.scheduled = true;
      l.usage.queue_s = Seconds(step_start - l.submitted);
    }
    if (sr.is_prefill) {
      any_prefill = true;
      if (sr.chunk_begin == 0 && sr.segment <= 0) {  // a prefill starts (or a recompute)
        l.prefill = l.prompt;
        l.prefill.insert(l.prefill.end(), l.sampled.begin(), l.sampled.end());
        if (arena) {
          l.cache = std::make_unique<PagedSequenceCache>(layout, c.context_size, &sched.kv(),
                                                         sr.id, arena.get());
        } else {  // a device model: its own cache on the pool sized like the manager's
          l.cache = c.model->NewCache(c.context_size, c.uniprefill.active_drop_layers());
          // Chunks then read their cached prefix in place (CudaSequenceCache).
          l.cache->ExpectPrefill(static_cast<int>(l.prefill.size()), !sr.uniprefill);
        }
        l.kept.clear();
      }
      // This chunk of it (the whole prefill unless the scheduler chunked it); earlier chunks are
      // in the cache. A later segment's chunk runs rows of the cache's boundary, not tokens.
      if (sr.segment <= 0) {
        l.feed.assign(l.prefill.begin() + sr.chunk_begin,
                      l.prefill.begin() + sr.chunk_begin + sr.num_tokens);
      } else {
        l.feed.clear();
      }
      counters.prompt_tokens += static_cast<int64_t>(l.feed.size());
    } else {
      any_decode = true;
      l.feed.assign(1, l.sampled.back());
    }
    SequenceStep s;
    s.cache = l.cache.get();
    s.tokens = l.feed;
    l.on_device = options.device_sampling && c.model->device() == Device::kCuda &&
                  !l.sampler.has_penalties() && l.params.logprobs <= 0;
    if (!sr.last_chunk) {
      // A chunk before a prefill's last: it only fills the cache (no logits, no token).
    } else if (l.on_device) {
      const SamplerConfig& sc = l.sampler.config();
      // f32 uniform below 1 (the kernel's draw is `u < cumulative probability`).
      const float u = std::min(static_cast<float>(l.sampler.NextUniform()), 0x1.fffffep-1f);
      l.device = {sc.temperature, sc.top_k, sc.top_p, sc.min_p, u, &l.device_token,
                  &l.device_logprob};
      s.sampling = &l.device;
    } else {
      s.logits = l.logits.data();
    }
    s.kept = sr.is_prefill ? &l.kept : nullptr;
    s.allow_drop = sr.uniprefill;
    s.selection = &l.selection;
    if (sr.segment >= 0) {
      l.chunk = SegmentChunk{sr.segment, sr.num_tokens, sr.segment_rows, sr.ends_segment()};
      s.chunk = &l.chunk;
      ++counters.segment_chunks;
      if (!sr.uniprefill) ++counters.dense_segment_chunks;
    }
    steps.push_back(s);
    step_live.push_back(&l);
  }
  ++counters.steps;
  if (any_prefill && any_decode) ++counters.mixed_steps;

  if (followers != nullptr) {
    if (Status st = SendRankPlan(*followers, FollowerPlan(*plan, step_live)); !st.ok()) {
      return Fail(st);
    }
  }
  std::vector<RequestStepResult> results;
  if (!steps.empty()) {
    Status st = c.model->ForwardBatch(*c.ctx, steps, c.uniprefill);
    // Under tensor parallelism a failed forward leaves the ranks out of step (or a rank died):
    // nothing more can run.
    if (!st.ok() && followers != nullptr) return Fail(st);
    if (!st.ok()) {
      // Fail this step's requests (their KV state is unknown); the others keep running.
      for (const ScheduledRequest& sr : plan->requests) {
        Live& l = *live.at(sr.id);
        (void)sched.Abort(sr.id);
        l.out->Finish();
        ++counters.requests_failed;
        Report(l, true, "error", "forward failed: " + st.message());
        by_public_id.erase(l.id);
        live.erase(sr.id);
      }
      (void)sched.OnStepDone({});
      return;
    }
  }
  const Clock::time_point now = Clock::now();
  int64_t sampled_now = 0;
  for (size_t i = 0; i < plan->requests.size(); ++i) {
    const ScheduledRequest& sr = plan->requests[i];
    Live& l = *step_live[i];
    RequestStepResult r;
    r.id = sr.id;
    if (sr.is_prefill && !sr.last_chunk) {  // nothing sampled yet
      // A segment's end: the next segment runs the rows its selection kept.
      if (sr.ends_segment()) r.next_segment_rows = l.cache->boundary().ready.rows();
      results.push_back(std::move(r));
      continue;
    }
    if (sr.is_prefill) {
      for (int s = 0; s < l.cache->layout().n_segments; ++s) {
        r.segment_tokens.push_back(l.cache->segment_length(s));
      }
      l.usage.kept.clear();
      for (const KeptTokens& k : l.kept) {
        l.usage.kept.push_back({k.layer, k.kept, k.alive});
        counters.uniprefill_alive_tokens += k.alive;
        counters.uniprefill_kept_tokens += k.kept;
      }
      if (!l.usage.kept.empty()) {
        counters.uniprefill_prefill_tokens += l.usage.kept.front().alive;
        counters.uniprefill_prefill_kept_tokens += l.usage.kept.back().kept;
      }
    }
    const int32_t token = l.on_device ? l.device_token : l.sampler.Sample(l.logits);
    l.sampler.Accept(token);
    l.sampled.push_back(token);
    ++sampled_now;
    if (!l.first_token) {
      l.first_token = true;
      l.usage.ttft_s = Seconds(now - l.submitted);
      counters.ttft_s.Observe(l.usage.ttft_s);
    } else {
      counters.inter_token_s.Observe(Seconds(now - l.last_token));
    }
    l.last_token = now;
    const bool eos_stops = l.params.stop_at_end_of_turn && !l.params.ignore_eos;
    const bool end_token = StopTokens{l.params.stop_token_ids}.IsStopToken(token) ||
                           (eos_stops && c.tokenizer->IsEndOfGeneration(token));
    if (end_token) {
      r.stop = true;
    } else {
      if (l.params.logprobs < 0) {
        l.unreported.push_back(SampledToken{token, 0, {}});
      } else if (l.on_device) {  // logprobs 0: the chosen token's, computed on the device
        l.unreported.push_back(SampledToken{token, l.device_logprob, {}});
      } else {
        l.unreported.push_back(WithLogprobs(token, l.logits, l.params.logprobs));
      }
      ++l.usage.completion_tokens;
      if (l.out->Push(token)) r.stop = true;  // a stop string completed
    }
    results.push_back(std::move(r));
  }
  counters.generation_tokens += sampled_now;
  recent_tokens.emplace_back(now, sampled_now);

  Result<std::vector<FinishedRequest>> finished = sched.OnStepDone(results);
  if (!finished.ok()) {
    FinishAll("error", "scheduler: " + finished.status().message());
    return;
  }
  std::unordered_map<RequestId, FinishReason> done;
  for (const FinishedRequest& f : *finished) done[f.id] = f.reason;
  // Settle the finished requests first, so the metrics a client reads after its final update
  // already count it (and its KV is already free).
  std::vector<std::pair<std::unique_ptr<Live>, std::string>> finals;
  for (const auto& [sid, reason] : done) {
    auto it = live.find(sid);
    if (it == live.end()) continue;
    Live& l = *it->second;
    std::string why = reason == FinishReason::kStop     ? "stop"
                      : reason == FinishReason::kLength ? "length"
                                                        : "abort";
    // Text held back for a possible stop string (or an incomplete character) ends now.
    if (l.out->Finish() && why == "length") why = "stop";
    l.usage.e2e_s = Seconds(now - l.submitted);
    if (why == "abort") {
      ++counters.requests_aborted;
    } else {
      counters.e2e_s.Observe(l.usage.e2e_s);
      ++(why == "stop" ? counters.requests_finished_stop : counters.requests_finished_length);
    }
    by_public_id.erase(l.id);
    finals.emplace_back(std::move(it->second), why);
    live.erase(it);
  }
  PublishMetrics();
  for (auto& [sid, l] : live) Report(*l, false, "", "");  // progress of requests still running
  for (auto& [l, why] : finals) Report(*l, true, why, "");
}

void BatchEngine::Impl::PublishMetrics() {
  const Scheduler& sched = *scheduler;
  const Clock::time_point now = Clock::now();
  while (!recent_tokens.empty() && now - recent_tokens.front().first > std::chrono::seconds(10)) {
    recent_tokens.pop_front();
  }
  int64_t tokens = 0;
  for (const auto& [t, n] : recent_tokens) tokens += n;
  const double span =
      recent_tokens.empty() ? 0 : std::max(1.0, Seconds(now - recent_tokens.front().first));
  counters.generation_tokens_per_s = span > 0 ? tokens / span : 0;
  counters.waiting = sched.num_waiting();
  counters.running = sched.num_running();
  const KvUsage kv = sched.kv().Usage();
  counters.kv_blocks_used = kv.used_blocks;
  counters.kv_bytes_used = kv.used_bytes + kv.state_bytes;
  counters.kv_bytes_dense = kv.dense_bytes + kv.state_bytes;
  counters.kv_bytes_saved = kv.saved_bytes;
  std::lock_guard<std::mutex> lock(mu);
  const int64_t submitted = metrics.requests_submitted;  // counted by Submit
  metrics = counters;
  metrics.requests_submitted = submitted;
}

StepBudgets DefaultStepBudgets(const std::string& device) {
  if (device == "cuda") return {2048, 8192};
  return {8192, 0};
}

}  // namespace uniprefill
