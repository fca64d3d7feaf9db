#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_set>

#include "model/window_keys.h"

namespace uniprefill {

int NextSegmentChunkRows(int remaining, int budget, int tail) {
  if (remaining <= std::max(budget, tail)) return remaining;
  return std::min(budget, remaining - tail);
}
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

// The rows a segment-wise prefill's segment must end with in one chunk: the queries its selection
// reads (UniPrefill), none for a dense prefill (it selects nothing).
int SelectionTail(const RequestInfo& r, int segment_rows) {
  return r.uniprefill ? std::min(r.selection_queries, segment_rows) : 0;
}

// Keeps block-count arithmetic (pages * layers * segments) far from int overflow.
constexpr int64_t kMaxRequestTokens = int64_t{1} << 30;

}  // namespace

const char* RequestStateName(RequestState state) {
  switch (state) {
    case RequestState::kWaiting: return "waiting";
    case RequestState::kRunning: return "running";
    case RequestState::kPreempted: return "preempted";
    case RequestState::kFinished: return "finished";
  }
  return "unknown";
}

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAborted: return "aborted";
  }
  return "unknown";
}

int StepPlan::num_tokens() const {
  int n = 0;
  for (const ScheduledRequest& r : requests) n += r.num_tokens;
  return n;
}

Scheduler::Scheduler(SchedulerConfig config, KvBlockManager kv)
    : config_(config), kv_(std::move(kv)) {}

Result<RequestId> Scheduler::Submit(const RequestSpec& spec) {
  if (spec.prompt_tokens < 1) {
    return InvalidArgument("a request needs a prompt of at least 1 token, got " +
                           Str(spec.prompt_tokens));
  }
  if (spec.max_tokens < 1) {
    return InvalidArgument("max_tokens must be >= 1, got " + Str(spec.max_tokens));
  }
  // The most the cache ever holds for it: the last sampled token is never fed back.
  const int64_t worst = int64_t{spec.prompt_tokens} + spec.max_tokens - 1;
  if (worst > kMaxRequestTokens) {
    return OutOfRange("prompt " + Str(spec.prompt_tokens) + " + max_tokens " +
                      Str(spec.max_tokens) + " exceeds " + Str(kMaxRequestTokens) + " tokens");
  }
  const int need = kv_.DenseBlocksFor(static_cast<int>(worst));
  if (need > kv_.num_blocks() || kv_.free_state_slots() + kv_.num_requests() == 0) {
    return ResourceExhausted(
        "a request of " + Str(spec.prompt_tokens) + " prompt tokens and max_tokens " +
        Str(spec.max_tokens) + " needs up to " + Str(need) + " KV blocks (" + Str(worst) +
        " tokens in each of " + Str(kv_.n_segments()) + " segments) but the whole cache holds " +
        Str(kv_.num_blocks()) + "; raise --kv-cache-memory or shorten the request");
  }
  RequestInfo info;
  info.id = next_id_++;
  info.prompt_tokens = spec.prompt_tokens;
  info.max_tokens = spec.max_tokens;
  info.uniprefill = spec.uniprefill;
  info.selection_queries = spec.selection_queries;
  requests_.emplace(info.id, info);
  waiting_.push_back(info.id);
  return info.id;
}

Status Scheduler::Abort(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return NotFound("request " + Str(id) + " is unknown or finished");
  RequestInfo& r = it->second;
  if (r.abort_requested) return OkStatus();
  r.abort_requested = true;
  if (open_step_) {
    for (const ScheduledRequest& s : open_step_->requests) {
      if (s.id == id) return OkStatus();  // finished by OnStepDone
    }
  }
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end());
  Finish(id, FinishReason::kAborted, aborted_);
  return OkStatus();
}

Result<StepPlan> Scheduler::Schedule() {
  if (open_step_) {
    return InvalidArgument("Schedule() called while step " + Str(stats_.steps) +
                           " is open; call OnStepDone() first");
  }
  StepPlan plan;
  ScheduleDecodes(plan);
  ContinueChunkedPrefills(plan);
  if (plan.preempted.empty()) AdmitWaiting(plan);
  TopUpChunkedPrefills(plan);
  RoundChunkToNearestTile(plan);
  AlignStepRows(plan);
  open_step_ = plan;
  return plan;
}

void Scheduler::ScheduleDecodes(StepPlan& plan) {
  size_t i = 0;
  while (i < running_.size()) {
    const RequestId id = running_[i];
    if (requests_.at(id).prefill_in_progress()) {  // its blocks are reserved; no decode yet
      ++i;
      continue;
    }
    bool preempted_self = false;
    while (!kv_.CanAppendDecode(id)) {
      const RequestId victim = running_.back();
      Preempt(victim, plan);
      if (victim == id) {
        preempted_self = true;
        break;
      }
    }
    if (preempted_self) break;  // it was the newest: nothing after it is left
    // CanAppendDecode held, so this cannot fail.
    if (!kv_.AppendDecode(id).ok()) break;
    plan.requests.push_back({id, 1, false, false});
    ++stats_.decode_tokens;
    ++i;
  }
}

SegmentCost Scheduler::Price(int segment) const {
  const std::vector<SegmentCost>& costs = config_.segment_costs;
  if (segment >= 0 && costs.size() == static_cast<size_t>(kv_.n_segments())) {
    return costs[segment];
  }
  SegmentCost whole{1.0, config_.attention_key_cost, config_.prefix_key_cost};
  whole.window_key_cost = config_.attention_window_key_cost;
  whole.window = config_.attention_window;
  whole.query_tile_rows = config_.attention_query_tile;
  return whole;
}

int Scheduler::ChunkCost(int segment, int prefix, int rows, int free_rows) const {
  return PricedChunkCost(Price(segment), prefix, rows, free_rows);
}

int Scheduler::PricedChunkCost(const SegmentCost& c, int prefix, int rows, int free_rows) {
  // The attention's rows: whole query tiles (each tile attends as if all its rows were real).
  const int tile = std::max(1, c.query_tile_rows);
  const double tiled = static_cast<double>((int64_t{rows} + tile - 1) / tile * tile);
  const double linear_rows = std::max(0, rows - std::max(0, free_rows));
  return static_cast<int>(std::min<double>(
      std::ceil(linear_rows * c.linear_share + tiled * c.key_cost * (prefix + tiled / 2.0) +
                c.window_key_cost * WindowKeys(prefix, tiled, c.window) +
                c.prefix_key_cost * prefix),
      std::numeric_limits<int>::max() / 2));
}

int Scheduler::RowsWithin(int segment, int prefix, int budget, int free_rows) const {
  if (budget <= 0) return 0;
  const SegmentCost c = Price(segment);
  const int rows = PricedRowsWithin(c, prefix, budget, MaxChunkRows(), free_rows);
  const int tile = c.query_tile_rows;
  if (tile <= 1) return rows;
  if (rows < tile) {
    // Not one whole tile paid for: any rows run one tile, so the tile does not price them (rows
    // per row's keys, as on the CPU; a deep prefix still advances by more than one row).
    SegmentCost per_row = c;
    per_row.query_tile_rows = 1;
    return PricedRowsWithin(per_row, prefix, budget, MaxChunkRows(), free_rows);
  }
  // A last, partial tile pays for a whole tile's keys: its rows are kept only where they raise
  // the rows per budget (shallow chunks, where the linear work dominates), else the chunk ends
  // at its last whole tile and the step ends sooner.
  const int whole = rows / tile * tile;
  if (whole < rows &&
      static_cast<double>(rows) * ChunkCost(segment, prefix, whole, free_rows) <
          static_cast<double>(whole) * ChunkCost(segment, prefix, rows, free_rows)) {
    return whole;
  }
  return rows;
}

int Scheduler::PricedRowsWithin(const SegmentCost& c, int prefix, int budget, int cap,
                                int free_rows) {
  // The window's keys as a cost per row at the prefix's depth (exact past the window, short of
  // it below; the loops below settle the rows on the exact price).
  const double k = c.key_cost,
               a = c.linear_share + k * prefix + c.window_key_cost * std::min(prefix + 1, c.window);
  // Free rows cost no linear work: as if the budget held their linear share more.
  const double for_rows = std::max(
      0.0, budget - c.prefix_key_cost * prefix + c.linear_share * std::max(0, free_rows));
  // The root of rows a + k rows^2 / 2 = for_rows (no tiles), then rounding and tiles fixed by
  // PricedChunkCost (the root is at least the tiled answer: at most a tile's steps down).
  // (A segment without linear work and keys, a = 0 and k = 0, costs nothing per row: the cap.)
  const double root = k > 0   ? (std::sqrt(a * a + 2.0 * k * for_rows) - a) / k
                      : a > 0 ? for_rows / a
                              : static_cast<double>(cap);
  int rows = static_cast<int>(std::clamp<double>(root, 1.0, cap));
  while (rows > 1 && PricedChunkCost(c, prefix, rows, free_rows) > budget) --rows;
  while (rows < cap && PricedChunkCost(c, prefix, rows + 1, free_rows) <= budget) ++rows;
  return rows;
}

namespace {

// Rows each segment's layers run in the plan (decodes run all of them), `self` left out; the
// segment-wise chunks by their segment, every other prefill in every segment. Without a price
// per segment (per_segment false) every chunk is priced as the whole model: one pool of rows.
std::vector<int> SegmentRows(const StepPlan& plan, int n_segments, bool per_segment,
                             const ScheduledRequest* self) {
  std::vector<int> rows(per_segment ? std::max(1, n_segments) : 1, 0);
  for (const ScheduledRequest& s : plan.requests) {
    if (&s == self) continue;
    if (per_segment && s.is_prefill && s.segment >= 0 &&
        s.segment < static_cast<int>(rows.size())) {
      rows[s.segment] += s.num_tokens;
    } else {
      for (int& r : rows) r += s.num_tokens;
    }
  }
  return rows;
}

bool HasDecodes(const StepPlan& plan) {
  return std::any_of(plan.requests.begin(), plan.requests.end(),
                     [](const ScheduledRequest& s) { return !s.is_prefill; });
}

}  // namespace

double Scheduler::WeightFloor() const {
  return std::min(config_.weight_floor_rows, config_.max_batched_tokens / 4.0);
}

int Scheduler::FreeRows(const StepPlan& plan, int segment, const ScheduledRequest* self) const {
  const int floor = static_cast<int>(WeightFloor());
  if (floor <= 0 || !HasDecodes(plan)) return 0;
  const bool per_segment = PricedPerSegment();
  const std::vector<int> rows = SegmentRows(plan, kv_.n_segments(), per_segment, self);
  int free_rows = floor;
  for (size_t s = 0; s < rows.size(); ++s) {
    if (!per_segment || segment < 0 || static_cast<int>(s) == segment) {
      free_rows = std::min(free_rows, std::max(0, floor - rows[s]));
    }
  }
  return free_rows;
}

double Scheduler::WeightFloorSlack(const StepPlan& plan) const {
  const double floor = WeightFloor();
  if (floor <= 0 || !HasDecodes(plan)) return 0;
  const bool per_segment = PricedPerSegment();
  const std::vector<int> rows = SegmentRows(plan, kv_.n_segments(), per_segment, nullptr);
  double slack = 0;
  for (size_t s = 0; s < rows.size(); ++s) {
    const double share = per_segment ? config_.segment_costs[s].linear_share : 1.0;
    slack += share * std::max(0.0, floor - rows[s]);
  }
  return slack;
}

int Scheduler::Cost(const ScheduledRequest& s) const {
  return s.is_prefill ? ChunkCost(s.segment, s.chunk_begin, s.num_tokens) : s.num_tokens;
}

double Scheduler::DecodeKeysCost(const ScheduledRequest& s) const {
  // Its attention over the request's keys: the prompt and what it has generated (later segments
  // of a UniPrefill prefill hold fewer, so this is an upper bound).
  if (s.is_prefill || config_.decode_key_cost <= 0) return 0;
  return config_.decode_key_cost * PrefillTokens(requests_.at(s.id));
}

int Scheduler::BudgetLeft(const StepPlan& plan) const {
  int used = 0;
  double decode_keys = 0;
  bool decodes = false;
  for (const ScheduledRequest& s : plan.requests) {
    used += Cost(s);
    decode_keys += DecodeKeysCost(s);
    decodes = decodes || !s.is_prefill;
  }
  // The decodes' keys take at most half the budget: many long decodes slow their steps, but
  // prefills (and the admissions behind them) still advance beside them instead of waiting for
  // the decodes to finish.
  used += static_cast<int>(std::ceil(std::min(decode_keys, config_.max_batched_tokens / 2.0) +
                                     WeightFloorSlack(plan)));
  // Decodes are planned first, so whether this step holds any is known before any chunk.
  const int budget = decodes ? config_.max_batched_tokens
                             : std::max(config_.max_batched_tokens, config_.prefill_only_tokens);
  return budget - used;
}

int Scheduler::RowsLeft(const StepPlan& plan) const {
  return MaxChunkRows() - plan.num_tokens();
}

double Scheduler::PrefillWorkLeft(const RequestInfo& r) const {
  if (r.segment < 0) return (r.prefill_target - r.prefilled) * Price(-1).linear_share;
  double work = (r.segment_rows - r.segment_done) * Price(r.segment).linear_share;
  for (int s = r.segment + 1; s < kv_.n_segments(); ++s) {
    work += static_cast<double>(r.segment_rows) * Price(s).linear_share;
  }
  return work;
}

bool Scheduler::DenseSegmentWise(bool fits) const {
  return config_.chunked_prefill && config_.segment_chunks && config_.dense_segment_chunks &&
         !fits && kv_.n_segments() > 1 && PricedPerSegment();
}

double Scheduler::WaitingPrefillWork(const RequestInfo& r) const {
  const int n = PrefillTokens(r);
  if (!(config_.chunked_prefill && config_.segment_chunks &&
        (r.uniprefill || DenseSegmentWise(/*fits=*/false)))) {
    return n * Price(-1).linear_share;
  }
  double work = 0;
  for (int s = 0; s < kv_.n_segments(); ++s) work += n * Price(s).linear_share;
  return work;
}

void Scheduler::ContinueChunkedPrefills(StepPlan& plan) {
  // First come, first served (vLLM's order: the first prompt to arrive gets its first token
  // first, as without chunks), but a job that will finish sooner than the oldest prefill does
  // not wait behind it: the oldest, every later prefill with less work left than it, and the
  // waiting head when its prefill is less work than that (admitted after these) split what the
  // decodes left in fair shares, so a short prompt arriving beside a long one is prefilled within
  // a few steps instead of after all of it. The other prefills wait their turn; what the shares
  // leave unused tops up these chunks after admission (in plan order).
  std::vector<RequestId> continuing;
  for (RequestId id : running_) {  // admission order: the oldest prefill first
    if (requests_.at(id).prefill_in_progress()) continuing.push_back(id);
  }
  if (continuing.empty()) return;
  const double oldest_left = PrefillWorkLeft(requests_.at(continuing.front()));
  std::vector<RequestId> sharing = {continuing.front()}, later;
  for (size_t i = 1; i < continuing.size(); ++i) {
    const bool sooner = PrefillWorkLeft(requests_.at(continuing[i])) < oldest_left;
    (sooner ? sharing : later).push_back(continuing[i]);
  }
  const bool head_shares = !waiting_.empty() && plan.preempted.empty() &&
                           WaitingPrefillWork(requests_.at(waiting_.front())) < oldest_left;
  int parties = static_cast<int>(sharing.size()) + (head_shares ? 1 : 0);
  auto schedule = [&](RequestId id, int budget) {
    const RequestInfo& r = requests_.at(id);
    const ScheduledRequest s = NextChunk(r, budget, RowsLeft(plan), FreeRows(plan, r.segment));
    if (!WorthItsOwnUnit(plan, s)) return;  // its budget tops up the others' chunks
    plan.requests.push_back(s);
    if (s.segment <= 0) stats_.prefill_tokens += s.num_tokens;  // later segments: same tokens
  };
  for (RequestId id : sharing) {
    const int budget_left = BudgetLeft(plan);
    if (budget_left <= 0 || RowsLeft(plan) <= 0) return;
    schedule(id, (budget_left + parties - 1) / parties);
    --parties;
  }
  if (head_shares) return;  // the rest is the head's share
  for (RequestId id : later) {
    const int budget_left = BudgetLeft(plan);
    if (budget_left <= 0 || RowsLeft(plan) <= 0) return;
    schedule(id, budget_left);
  }
}

bool Scheduler::WorthItsOwnUnit(const StepPlan& plan, const ScheduledRequest& s) const {
  if (s.num_tokens >= config_.min_extra_chunk_rows || s.last_chunk || s.ends_segment()) {
    return true;
  }
  return std::none_of(plan.requests.begin(), plan.requests.end(),
                      [](const ScheduledRequest& p) { return p.is_prefill; });
}

ScheduledRequest Scheduler::NextChunk(const RequestInfo& r, int budget, int max_rows,
                                      int free_rows) const {
  ScheduledRequest s{r.id, 0, true, false};
  if (r.segment < 0) {  // dense chunks: every layer, tokens in order
    s.chunk_begin = r.prefilled;
    s.num_tokens = std::min({RowsWithin(-1, r.prefilled, budget, free_rows), max_rows,
                             r.prefill_target - r.prefilled});
    s.last_chunk = s.prefill_tokens() == r.prefill_target;
    return s;
  }
  s.uniprefill = r.uniprefill;  // a dense prefill may run segment-wise too (keeping every row)
  s.segment = r.segment;
  s.segment_rows = r.segment_rows;
  s.chunk_begin = r.segment_done;
  s.num_tokens = NextSegmentChunkRows(
      r.segment_rows - r.segment_done,
      std::min(RowsWithin(r.segment, r.segment_done, budget, free_rows), max_rows),
      SelectionTail(r, r.segment_rows));
  s.last_chunk = s.ends_segment() && r.segment + 1 == kv_.n_segments();
  return s;
}

void Scheduler::TopUpChunkedPrefills(StepPlan& plan) {
  for (ScheduledRequest& s : plan.requests) {
    const int budget_left = BudgetLeft(plan);
    if (budget_left <= 0) return;
    if (!s.is_prefill || s.last_chunk) continue;  // decodes, whole prefills, finished chunks
    if (s.ends_segment()) continue;
    // The chunk grows to what its own cost and the budget left pay for (a segment-wise one up
    // to its segment's end, keeping the tail rule).
    const int free_rows = FreeRows(plan, s.segment, &s);
    const int own = ChunkCost(s.segment, s.chunk_begin, s.num_tokens, free_rows);
    const int n = NextChunk(requests_.at(s.id), own + budget_left, s.num_tokens + RowsLeft(plan),
                            free_rows)
                      .num_tokens;
    if (n <= s.num_tokens) continue;
    if (s.segment <= 0) stats_.prefill_tokens += n - s.num_tokens;
    s.num_tokens = n;
    s.last_chunk = s.segment >= 0 ? s.ends_segment() && s.segment + 1 == kv_.n_segments()
                                  : s.prefill_tokens() == requests_.at(s.id).prefill_target;
  }
}

void Scheduler::RoundChunkToNearestTile(StepPlan& plan) {
  const double overshoot = config_.tile_overshoot;
  if (overshoot <= 0 || !HasDecodes(plan)) return;
  ScheduledRequest* chunk = nullptr;  // the step's last chunk that ends neither segment nor prompt
  for (ScheduledRequest& s : plan.requests) {
    if (s.is_prefill && !s.last_chunk && !s.ends_segment()) chunk = &s;
  }
  if (chunk == nullptr) return;
  const int tile = Price(chunk->segment).query_tile_rows;
  // A chunk with a part tile was ended by the budget, not by a tile (RowsWithin).
  if (tile <= 1 || chunk->num_tokens % tile != 0) return;
  const RequestInfo& r = requests_.at(chunk->id);
  const int before = chunk->num_tokens;
  int rows = std::min(before + tile, before + RowsLeft(plan));
  if (chunk->segment < 0) {
    rows = std::min(rows, r.prefill_target - chunk->chunk_begin);
  } else {  // the segment's tail rule holds: a chunk stops `tail` short of its end or takes all
    rows = NextSegmentChunkRows(chunk->segment_rows - chunk->chunk_begin, rows,
                                SelectionTail(r, chunk->segment_rows));
  }
  if (rows <= before) return;
  const int budget = config_.max_batched_tokens;  // the step holds decodes
  const int under = BudgetLeft(plan);             // budget - price
  chunk->num_tokens = rows;
  const int over = -BudgetLeft(plan);  // price - budget, with the tile
  if (under <= 0 || over >= under || over > overshoot * budget) {
    chunk->num_tokens = before;
    return;
  }
  chunk->last_chunk = chunk->segment >= 0
                          ? chunk->ends_segment() && chunk->segment + 1 == kv_.n_segments()
                          : chunk->prefill_tokens() == r.prefill_target;
  if (chunk->segment <= 0) stats_.prefill_tokens += rows - before;  // later segments: same tokens
}

void Scheduler::AlignStepRows(StepPlan& plan) {
  const int tile = config_.linear_row_tile;
  if (tile <= 1) return;
  ScheduledRequest* chunk = nullptr;  // the step's last chunk that ends neither segment nor prompt
  for (ScheduledRequest& s : plan.requests) {
    if (s.is_prefill && !s.last_chunk && !s.ends_segment()) chunk = &s;
  }
  if (chunk == nullptr) return;
  // The rows of the layers the chunk runs: decodes and dense prefills run every layer; a
  // segment-wise chunk its segment's. Beside a segment-wise chunk a dense one's layers run
  // different counts: left alone.
  int rows = 0;
  for (const ScheduledRequest& s : plan.requests) {
    if (!s.is_prefill || s.segment < 0) {
      rows += s.num_tokens;
    } else if (chunk->segment < 0) {
      return;
    } else if (s.segment == chunk->segment) {
      rows += s.num_tokens;
    }
  }
  const int over = rows % tile;
  if (rows < tile || over == 0) return;
  const int keep = chunk->num_tokens - over;
  if (keep < std::max({tile, config_.attention_query_tile, config_.min_extra_chunk_rows})) return;
  // Kept, the chunk's R rows (linear work R share) cost the step's price P plus the unpriced
  // rest of a tile, (tile - over) share; given up, R - over rows cost about P - over share (its
  // keys are priced in whole query tiles, which stay). Fewer rows win when
  // R share / (P + (tile - over) share) < (R - over) share / (P - over share), i.e.
  // R tile share > over (P + (tile - over) share).
  const int budget = HasDecodes(plan)
                         ? config_.max_batched_tokens
                         : std::max(config_.max_batched_tokens, config_.prefill_only_tokens);
  const double price = std::max(1, budget - BudgetLeft(plan));
  const double share = Price(chunk->segment).linear_share;
  const double r = chunk->num_tokens;
  if (r * tile * share <= over * (price + (tile - over) * share)) return;
  chunk->num_tokens = keep;
  if (chunk->segment <= 0) stats_.prefill_tokens -= over;  // later segments: same tokens
}

void Scheduler::AdmitWaiting(StepPlan& plan) {
  int budget_left = BudgetLeft(plan);
  bool any_admitted = false;
  while (!waiting_.empty()) {
    RequestInfo& r = requests_.at(waiting_.front());
    const int n = PrefillTokens(r);
    // A UniPrefill prefill that fits runs whole (exactly the unchunked path); a longer one runs
    // segment-wise when the model can. Fitting takes the rows too: segment-wise chunks cheaper
    // than their rows may already hold most of the step's rows (a randomized simulation found a
    // 48-row prefill admitted whole beside a 256-row chunk of a 256-token step).
    const bool fits =
        ChunkCost(-1, 0, n, FreeRows(plan, -1)) <= budget_left && n <= RowsLeft(plan);
    const bool chunked = config_.chunked_prefill &&
                         (!r.uniprefill || (config_.segment_chunks && !fits));
    if (chunked) {
      if (budget_left <= 0 || RowsLeft(plan) <= 0) break;  // a chunk needs some budget and rows
    } else if (any_admitted && !fits) {
      break;  // a whole prefill must fit, unless it is the step's first admission
    }
    ScheduledRequest s{r.id, n, true, r.uniprefill};
    RequestInfo started = r;  // its chunked prefill's state, kept once it is admitted
    const bool segment_wise = chunked && (r.uniprefill || DenseSegmentWise(fits));
    if (chunked) {
      started.prefill_target = n;
      started.prefilled = 0;
      if (segment_wise) {
        started.segment = 0;
        started.segment_rows = n;
        started.segment_done = 0;
      }
      s = NextChunk(started, budget_left, RowsLeft(plan), FreeRows(plan, started.segment));
      if (!WorthItsOwnUnit(plan, s)) break;  // too few rows beside other prefills: next step
    }
    const std::vector<int> dense(kv_.n_segments(), n);
    if (!kv_.CanAllocate(dense) || !kv_.Allocate(r.id, dense).ok()) break;
    waiting_.pop_front();
    running_.push_back(r.id);
    if (chunked) r = started;
    r.state = RequestState::kRunning;
    plan.requests.push_back(s);
    stats_.prefill_tokens += s.num_tokens;
    budget_left = BudgetLeft(plan);
    any_admitted = true;
  }
}

void Scheduler::Preempt(RequestId id, StepPlan& plan) {
  RequestInfo& r = requests_.at(id);
  (void)kv_.Free(id);
  running_.erase(std::find(running_.begin(), running_.end(), id));
  r.state = RequestState::kPreempted;
  r.prefilled = r.prefill_target = 0;  // a chunked prefill starts over when re-admitted
  r.segment = -1;                      // (its boundary rows went with its cache)
  r.segment_rows = r.segment_done = 0;
  ++r.preemptions;
  waiting_.push_front(id);
  plan.preempted.push_back(id);
  ++stats_.preemptions;
}

void Scheduler::Finish(RequestId id, FinishReason reason, std::vector<FinishedRequest>& out) {
  auto it = requests_.find(id);
  if (kv_.Contains(id)) (void)kv_.Free(id);
  auto run = std::find(running_.begin(), running_.end(), id);
  if (run != running_.end()) running_.erase(run);
  out.push_back({id, reason, it->second.generated});
  requests_.erase(it);
  ++stats_.finished;
}

Status Scheduler::ValidateResults(std::span<const RequestStepResult> results) const {
  std::unordered_map<RequestId, const ScheduledRequest*> planned;
  for (const ScheduledRequest& s : open_step_->requests) planned[s.id] = &s;
  std::unordered_set<RequestId> seen;
  for (const RequestStepResult& res : results) {
    const std::string who = "step result for request " + Str(res.id);
    auto it = planned.find(res.id);
    if (it == planned.end()) return InvalidArgument(who + ": not scheduled in this step");
    if (!seen.insert(res.id).second) return InvalidArgument(who + ": given twice");
    const std::vector<int>& t = res.segment_tokens;
    const ScheduledRequest& s = *it->second;
    if (s.is_prefill && !s.last_chunk && res.stop) {
      return InvalidArgument(who + ": a prefill chunk that is not the last samples nothing to stop");
    }
    if (res.next_segment_rows != 0) {
      if (!s.ends_segment() || s.last_chunk) {
        return InvalidArgument(who + ": next_segment_rows come with a chunk that ends a segment "
                               "before the last");
      }
      if (res.next_segment_rows < 1 || res.next_segment_rows > s.segment_rows) {
        return InvalidArgument(who + ": the selection kept " + Str(res.next_segment_rows) +
                               " of the segment's " + Str(s.segment_rows) + " rows");
      }
    }
    if (t.empty()) continue;
    if (!s.is_prefill) return InvalidArgument(who + ": a decode has no segment_tokens");
    if (!s.last_chunk) {
      return InvalidArgument(who + ": segment_tokens come with a prefill's last chunk only");
    }
    if (static_cast<int>(t.size()) != kv_.n_segments()) {
      return InvalidArgument(who + ": " + Str(t.size()) + " segment counts for " +
                             Str(kv_.n_segments()) + " segments");
    }
    const int prefill = s.segment >= 0 ? requests_.at(s.id).prefill_target : s.prefill_tokens();
    if (t[0] != prefill) {
      return InvalidArgument(who + ": segment 0 holds " + Str(t[0]) + " tokens, the prefill had " +
                             Str(prefill));
    }
    for (size_t i = 1; i < t.size(); ++i) {
      if (t[i] > t[i - 1] || t[i] < 1) {
        return InvalidArgument(who + ": segment " + Str(i) + " holds " + Str(t[i]) +
                               " tokens; kept counts must be >= 1 and non-increasing");
      }
    }
  }
  return OkStatus();
}

Result<std::vector<FinishedRequest>> Scheduler::OnStepDone(
    std::span<const RequestStepResult> results) {
  if (!open_step_) return InvalidArgument("OnStepDone() without an open step; call Schedule()");
  UP_RETURN_IF_ERROR(ValidateResults(results));
  std::unordered_map<RequestId, const RequestStepResult*> by_id;
  for (const RequestStepResult& res : results) by_id[res.id] = &res;

  std::vector<FinishedRequest> finished = std::move(aborted_);
  aborted_.clear();
  for (const ScheduledRequest& s : open_step_->requests) {
    RequestInfo& r = requests_.at(s.id);
    auto found = by_id.find(s.id);
    const RequestStepResult* res = found == by_id.end() ? nullptr : found->second;
    if (s.is_prefill && !s.last_chunk) {  // a chunk: nothing sampled, the reservation stays
      if (s.segment < 0) {
        r.prefilled += s.num_tokens;
      } else if (s.ends_segment()) {  // the next segment runs the rows its selection kept
        r.segment_rows = res && res->next_segment_rows > 0 ? res->next_segment_rows
                                                          : r.segment_rows;
        ++r.segment;
        r.segment_done = 0;
      } else {
        r.segment_done += s.num_tokens;
      }
      if (r.abort_requested) Finish(s.id, FinishReason::kAborted, finished);
      continue;
    }
    if (s.is_prefill) {
      const bool kept = res && !res->segment_tokens.empty();
      const int prefill = s.segment >= 0 ? r.prefill_target : s.prefill_tokens();
      const std::vector<int> tokens =
          kept ? res->segment_tokens : std::vector<int>(kv_.n_segments(), prefill);
      (void)kv_.CommitPrefill(s.id, tokens);  // validated above: within the reservation
      r.prefilled = r.prefill_target = 0;     // the prefill is done
      r.segment = -1;
      r.segment_rows = r.segment_done = 0;
    } else {
      (void)kv_.ReleaseWindow(s.id);
    }
    ++r.generated;
    if (r.abort_requested) {
      Finish(s.id, FinishReason::kAborted, finished);
    } else if (res && res->stop) {
      Finish(s.id, FinishReason::kStop, finished);
    } else if (r.generated >= r.max_tokens) {
      Finish(s.id, FinishReason::kLength, finished);
    }
  }
  open_step_.reset();
  ++stats_.steps;
  return finished;
}

bool Scheduler::has_unfinished() const { return !requests_.empty() || !aborted_.empty(); }

const RequestInfo* Scheduler::Find(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : &it->second;
}

Status Scheduler::CheckInvariants() const {
  std::unordered_set<RequestId> seen;
  for (RequestId id : waiting_) {
    const RequestInfo* r = Find(id);
    if (!r || !seen.insert(id).second) {
      return Internal("waiting request " + Str(id) + " unknown or queued twice");
    }
    if (r->state != RequestState::kWaiting && r->state != RequestState::kPreempted) {
      return Internal("waiting request " + Str(id) + " is " + RequestStateName(r->state));
    }
    if (kv_.Contains(id)) return Internal("waiting request " + Str(id) + " holds KV blocks");
  }
  // What the manager holds for a prefill in flight or a chunked one between chunks: the dense
  // reservation of the whole prefill.
  std::unordered_map<RequestId, int> prefill_tokens;
  if (open_step_) {
    for (const ScheduledRequest& s : open_step_->requests) {
      if (s.is_prefill) prefill_tokens[s.id] = s.prefill_tokens();
    }
  }
  for (RequestId id : running_) {
    const RequestInfo* r = Find(id);
    if (!r || !seen.insert(id).second) {
      return Internal("running request " + Str(id) + " unknown or listed twice");
    }
    if (r->state != RequestState::kRunning) {
      return Internal("running request " + Str(id) + " is " + RequestStateName(r->state));
    }
    if (!kv_.Contains(id)) return Internal("running request " + Str(id) + " holds no KV blocks");
    // Between steps the cache holds every token fed so far: all but the last sampled one.
    auto p = prefill_tokens.find(id);
    const int expect = r->prefill_in_progress()     ? r->prefill_target
                       : p != prefill_tokens.end() ? p->second
                                                   : r->prompt_tokens + r->generated -
                                                         (open_step_ ? 0 : 1);
    if (r->prefill_in_progress() && r->prefilled > r->prefill_target) {
      return Internal("running request " + Str(id) + " prefilled past its prefill");
    }
    if (r->segment >= 0 &&
        (!r->prefill_in_progress() || r->segment >= kv_.n_segments() ||
         r->segment_done >= r->segment_rows || r->segment_rows > r->prefill_target)) {
      return Internal("running request " + Str(id) + " is at row " + Str(r->segment_done) +
                      " of " + Str(r->segment_rows) + " in segment " + Str(r->segment) +
                      ", outside its segment-wise prefill");
    }
    if (kv_.segment_tokens(id, 0) != expect) {
      return Internal("running request " + Str(id) + " holds " + Str(kv_.segment_tokens(id, 0)) +
                      " tokens in segment 0, expected " + Str(expect));
    }
    for (int s = 1; s < kv_.n_segments(); ++s) {
      if (kv_.segment_tokens(id, s) > kv_.segment_tokens(id, s - 1)) {
        return Internal("running request " + Str(id) + " holds more tokens in segment " + Str(s) +
                        " than in segment " + Str(s - 1));
      }
    }
  }
  if (seen.size() != requests_.size()) {
    return Internal(Str(requests_.size()) + " unfinished requests but " + Str(seen.size()) +
                    " queued or running");
  }
  if (kv_.num_requests() != num_running()) {
    return Internal("KV holds " + Str(kv_.num_requests()) + " requests, " + Str(num_running()) +
                    " are running");
  }
  return kv_.CheckInvariants();
}

}  // namespace uniprefill
