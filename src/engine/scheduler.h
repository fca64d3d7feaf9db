// Scheduler: decides, step by step, which requests run and with how many tokens, under one token
// budget per step (--max-batched-tokens) and the paged KV memory (KvBlockManager). Plain data in
// (request sizes, per-step results), plain data out (StepPlan): it is tested without a model.
//
// Policy, in the order Schedule() applies it:
// 1. Every running request decodes one token, oldest admission first. When one cannot get a KV
//    block, the most recently admitted running request is preempted (its blocks are freed and it
//    goes back to the front of the waiting queue), possibly the request itself; repeat until it
//    fits. A preempted request is later recomputed: its prompt plus the tokens it generated become
//    one prefill (the engine feeds those token ids).
// 2. Running requests whose prefill is chunked and not done get their next chunk, first come
//    first served (the first prompt to arrive gets its first token first, as without chunks),
//    except that a job which will finish sooner than the oldest prefill does not wait behind
//    it: the oldest, every later prefill with fewer rows left than it, and the head of the
//    waiting queue when its prompt is shorter than that, split what the decodes left in fair
//    shares (a short prompt arriving beside a long one is prefilled within a few steps instead of
//    after all of it). Other prefills wait their turn; what the shares leave unused tops these
//    chunks up after admission (in plan order).
// 3. Unless this step preempted (memory is short: admitting now would only thrash), waiting
//    requests are admitted first-come-first-served while the token budget and KV memory allow.
//    Admission reserves the dense worst case (the whole prefill in every segment); OnStepDone
//    shrinks it to the kept counts. With SchedulerConfig::chunked_prefill a prefill longer than
//    what the budget leaves is cut into chunks that fill it (Sarathi-style: a long prompt shares
//    its steps with the running decodes instead of stalling them); only the last chunk samples.
//    A dense prefill's chunks run every layer, each attending to the chunks before it through
//    the cache. A UniPrefill prefill runs segment-wise (segment_chunks; docs/design.md section
//    2): chunks of segment 0's tokens, then, once the segment's last chunk reported what its
//    selection kept (RequestStepResult::next_segment_rows), chunks of those rows through
//    segment 1, and so on; each segment's last chunk holds the selection's last n queries
//    (NextSegmentChunkRows). A UniPrefill prefill that fits runs whole; without segment_chunks
//    every one does, and the first whole prefill of a step is admitted even when it does not fit
//    the remaining budget (that is how a prompt longer than the budget runs) instead of waiting
//    forever. The queue is strict FCFS: a head that does not fit stops admission (no overtaking,
//    so long prompts do not starve).
// A step's tokens therefore stay within the budget, except a whole UniPrefill prefill without
// segment_chunks, and a segment's last chunk where the budget is below the n queries it holds.
//
// Lifecycle: Submit -> waiting -> (Schedule admits) running -> (OnStepDone) finished, with
// running -> preempted (waiting again) on memory pressure. Every submitted request is reported
// finished exactly once, in the list OnStepDone returns. Submit rejects a request that could not
// run even alone: prompt + max_tokens - 1 tokens in every segment must fit the whole KV pool, which
// then guarantees progress (a lone running request always finds its blocks).
//
// Protocol: Schedule() opens a step, OnStepDone() closes it; between them the block tables in kv()
// are the ones the step must write to and read from. Not for: sampling, token ids, streaming, or
// tensor memory; priorities are a later issue.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kv/kv_block_manager.h"
#include "model/segment_cost.h"

namespace uniprefill {

// Rows of a segment-wise prefill's next chunk, with `remaining` rows of the segment left and
// `budget` rows to spend: the segment's last chunk must hold the segment's last `tail` rows (the
// selection reads the last n queries; 0 in the last segment), so a chunk stops `tail` rows short
// of the end unless it takes everything left. With budget < tail the last chunk runs `tail` rows.
int NextSegmentChunkRows(int remaining, int budget, int tail);

struct SchedulerConfig {
  int max_batched_tokens = 8192;  // --max-batched-tokens: tokens of all requests in one step
  bool chunked_prefill = true;    // cut prefills into chunks that fit the step's budget
  // With chunked_prefill: cut UniPrefill prefills segment-wise (the model runs
  // SequenceStep::chunk); false: such a prefill runs whole in one step.
  bool segment_chunks = true;
  // With segment_chunks: a dense prefill that does not fit the step runs segment-wise too, at the
  // cache's segment boundaries (the UniPrefill drop layers), keeping every row at each boundary
  // (SequenceStep::allow_drop false): the same computation, cut by layers as well as by rows. A
  // chunk deep in a long prompt is priced by its attention, so an all-layer chunk there gets a
  // few hundred rows (GEMMs at low efficiency, ~500 small kernels a forward for them); a
  // segment's chunk in a step of the same price runs about n_segments times the rows. Only where
  // each segment is priced (segment_costs; Scheduler::DenseSegmentWise). false: a dense
  // prefill's chunks run every layer.
  bool dense_segment_chunks = false;
  // What one cached key that a chunk's row attends costs, in rows of the budget (the model's
  // attention FLOPs per key over its linear FLOPs per row: Model::AttentionKeyCost). A prefill
  // chunk of r rows after p cached keys costs r (1 + attention_key_cost (p + r / 2)), so a step
  // deep into a long prompt takes fewer rows and lasts about as long as an early one. 0: the
  // budget counts rows only (as vLLM's token budget does).
  double attention_key_cost = 0;
  // Once per chunk and cached key (SegmentCost::prefix_key_cost): a dense chunk of r rows after
  // p keys then costs r (1 + attention_key_cost (p + r / 2)) + prefix_key_cost p.
  double prefix_key_cost = 0;
  // The sliding-window layers' keys (SegmentCost::window_key_cost and window): a chunk also pays
  // attention_window_key_cost for every key its rows see inside a window of attention_window
  // (min(p + i + 1, window) for its row i), so a step past the window is not priced as a shallow
  // one (Gemma 3's 15 sliding layers: ~16% of a row's FLOPs there). 0: unpriced.
  double attention_window_key_cost = 0;
  int attention_window = 0;
  // The backend's attention query tile (SegmentCost::query_tile_rows): a chunk's keys are priced
  // for its rows rounded up to whole tiles, so chunks that attend deep prefixes come out as whole
  // tiles (a 400-row chunk ran 4 tiles of 128-row CTAs, the last holding 16 rows, for the price
  // of 3.1).
  int attention_query_tile = 1;
  // What one cached key that a decode attends costs, in rows of the budget (SegmentCost::
  // decode_key_cost over every layer): a decode after c tokens costs 1 + decode_key_cost c. 0:
  // a decode costs its row (the CPU; a 32K decode on the H200 took ~2 ms of a ~50 ms step).
  // A step's decodes spend at most half the budget on their keys, so prefills always advance.
  double decode_key_cost = 0;
  // The rows at which a step's linear layers stop being bound by streaming their weights (the
  // backend's measurement, SegmentCost::weight_floor_rows): in a step that holds decodes every
  // layer runs (the decodes need all of them), so each segment's layers cost at least this many
  // rows of their share, however few rows run them. A segment-wise chunk covers only its
  // segment's layers: beside decodes, the other segments cost their weights' stream, which the
  // budget then pays (on the H200 a served step's fit gave ~0.07 ms per layer so run, ~1.8 ms of
  // a ~45 ms UniPrefill step, unpriced before). A chunk's first rows in a segment that already
  // pays its floor are free. At most a quarter of max_batched_tokens counts (a step's decodes
  // then leave prefills at least a quarter, their keys taking at most half). 0: rows only (the
  // CPU; the CUDA backend with UNIPREFILL_CUDA_WEIGHT_FLOOR=0). Dense chunks are unaffected
  // where they run at least this many rows. Served on the H200 (23rd session, 4 x 32K, two runs):
  // UniPrefill's ITL p99 48.3 / 50.3 ms priced against 53.4 / 52.7 unpriced, TTFT no worse.
  double weight_floor_rows = 0;
  // A prefill chunk of fewer rows that neither ends its segment nor its prefill is scheduled
  // only as the step's first prefill (the backend's SegmentCost::min_extra_chunk_rows): beside
  // another prompt's chunk it would pay a request's fixed per-layer costs for little work. On
  // the H200 each such piece (median 57 rows) added ~3.5 ms to its step, and 26 of the 29 steps
  // with decodes over 50 ms held one (the 19th session's 4 x 32K traces). 0: any size.
  int min_extra_chunk_rows = 0;
  // The backend's GEMM row tile (SegmentCost::linear_row_tile): a step of whole tiles plus r rows
  // runs a whole tile more of linear work for r rows (on the H200 one decode beside a 1024-row
  // chunk added 2.6 ms to its 43 ms, four at 32K 6.1 ms; bench step, 23rd session). A chunk that
  // ends neither its segment nor its prompt gives up those r rows when that raises the step's
  // prefill rows per cost (AlignStepRows; a segment-wise chunk by the rows of its segment's
  // layers): in a step that runs them anyway, the decodes' rows then fill the last tile. 0: off.
  int linear_row_tile = 0;
  // Deep in a long prompt each whole query tile (attention_query_tile) of a chunk is a large share
  // of the budget, and ending the chunk at the last tile that fits can leave a step well short of
  // it: on the H200 (8B shape, budget 2048, a 130K prompt beside 16 decodes) 80 of the prompt's
  // 252 forwards ran 256-row chunks 71-110K deep in 31-39 ms steps beside the others' 40-43 ms,
  // a 384-row chunk pricing 5-19% over. In a step that holds decodes, its last chunk that ends
  // neither its segment nor its prompt takes one tile more when that brings the step's price
  // nearer its budget and at most this share over it (fewer, fuller steps for the long prompt;
  // the decodes' steps no longer than the budget's others). 0: off, the default (served on an H100
  // in the 26th session: 0-1% off the TTFT ratios for 2-6 ms of the shorts' ITL p99).
  double tile_overshoot = 0;
  // The budget of a step that holds no decodes (nobody's next token waits on it), when larger
  // than max_batched_tokens: a long prompt with no decodes beside it is prefilled in larger
  // chunks, at nearly the rate of a whole prefill. 0: max_batched_tokens for every step.
  int prefill_only_tokens = 0;
  // Segment-wise chunks (segment_chunks): what segment s's chunk costs per row and per cached key
  // (Model::SegmentCosts, one per segment). A chunk of r rows after p rows of its segment costs
  // r (linear_share + key_cost (p + r / 2)): a segment holding an eighth of the layers runs about
  // eight times the rows in a step of the same length. Empty (or not one per segment): every
  // segment priced as the whole model, (1, attention_key_cost).
  std::vector<SegmentCost> segment_costs;
};

enum class RequestState { kWaiting, kRunning, kPreempted, kFinished };
enum class FinishReason { kStop, kLength, kAborted };

const char* RequestStateName(RequestState state);
const char* FinishReasonName(FinishReason reason);

// What a request asks for: sizes only (the engine keeps the token ids).
struct RequestSpec {
  int prompt_tokens = 0;
  int max_tokens = 1;     // tokens to generate, >= 1
  bool uniprefill = true;  // whether its prefill may drop tokens
  // UniPrefill: the queries its selection reads (n); each segment's last chunk holds them.
  int selection_queries = 0;
};

struct RequestInfo {
  RequestId id = 0;
  int prompt_tokens = 0;
  int generated = 0;  // tokens sampled so far (each step of a request samples one)
  int max_tokens = 1;
  bool uniprefill = true;
  RequestState state = RequestState::kWaiting;  // kPreempted: waiting to be recomputed
  int preemptions = 0;
  bool abort_requested = false;
  // Running with a chunked prefill: tokens of its prefill (prompt + generated at admission) whose
  // chunks are done; prefill_target is that prefill's length (0: not in a chunked prefill).
  int prefilled = 0;
  int prefill_target = 0;
  // A segment-wise chunked prefill: the segment whose chunks run now (-1: dense chunks, or no
  // chunked prefill), that segment's rows (its kept tokens) and how many of them are done.
  int segment = -1;
  int segment_rows = 0;
  int segment_done = 0;
  int selection_queries = 0;
  bool prefill_in_progress() const { return prefill_target > 0 && prefilled < prefill_target; }
};

// One request's part of a step.
struct ScheduledRequest {
  RequestId id = 0;
  int num_tokens = 0;   // prefill: this chunk's tokens (all of prompt + generated unless chunked)
  bool is_prefill = false;
  bool uniprefill = false;  // a prefill that may drop tokens (false for decodes)
  // Prefills: where this chunk starts in the prefill's tokens, and whether it ends the prefill
  // (only then is a token sampled; an unchunked prefill is one chunk from 0).
  int chunk_begin = 0;
  bool last_chunk = true;
  // A segment-wise chunk (a UniPrefill prefill longer than its share): rows [chunk_begin,
  // chunk_begin + num_tokens) of segment `segment`'s segment_rows rows, which it runs that
  // segment's layers on; last_chunk is the last segment's end. -1: every layer (dense chunks,
  // whole prefills, decodes).
  int segment = -1;
  int segment_rows = 0;
  bool ends_segment() const { return segment >= 0 && chunk_begin + num_tokens == segment_rows; }
  int prefill_tokens() const { return chunk_begin + num_tokens; }  // done after this chunk
  bool operator==(const ScheduledRequest&) const = default;
};

struct StepPlan {
  std::vector<ScheduledRequest> requests;  // decodes (admission order), then prefills (FCFS)
  std::vector<RequestId> preempted;        // lost their KV this step; recomputed later
  int num_tokens() const;
  bool empty() const { return requests.empty() && preempted.empty(); }
  bool operator==(const StepPlan&) const = default;
};

// What the step produced for one scheduled request. Requests without an entry count as dense
// (nothing dropped) and not stopped.
struct RequestStepResult {
  RequestId id = 0;
  // Prefills only: tokens each segment holds after the forward (segment 0 = the prefill length,
  // then UniPrefill's kept counts, non-increasing, >= 1). Empty: dense. Never for a chunk that
  // is not its prefill's last.
  std::vector<int> segment_tokens;
  bool stop = false;  // the sampled token ends the request (EOS, stop string)
  // A segment-wise chunk that ended a segment before the last: the rows its selection kept, which
  // the next segment's chunks run (0: every row kept).
  int next_segment_rows = 0;
};

struct FinishedRequest {
  RequestId id = 0;
  FinishReason reason = FinishReason::kStop;
  int generated = 0;
  bool operator==(const FinishedRequest&) const = default;
};

struct SchedulerStats {
  int64_t steps = 0;
  int64_t prefill_tokens = 0;  // recomputed tokens included
  int64_t decode_tokens = 0;
  int64_t preemptions = 0;
  int64_t finished = 0;
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, KvBlockManager kv);

  // Queues a request; its id is returned (0, 1, 2, ... in submission order). InvalidArgument for
  // empty prompts or max_tokens < 1; ResourceExhausted when it could never fit the KV memory.
  Result<RequestId> Submit(const RequestSpec& spec);
  // Ends a request early. Its blocks are freed now, or when the step it is part of is done; either
  // way the next OnStepDone reports it (kAborted). NotFound for unknown or finished ids.
  Status Abort(RequestId id);

  // Opens a step (see the header comment). InvalidArgument while a step is open.
  Result<StepPlan> Schedule();
  // Closes the open step: every scheduled request sampled one token, except prefill chunks that
  // are not their prefill's last (they sampled nothing). Validates all results first
  // (ids in the plan, no duplicates, kept counts within the reservation); on error nothing changes.
  Result<std::vector<FinishedRequest>> OnStepDone(std::span<const RequestStepResult> results);

  bool has_unfinished() const;
  bool step_open() const { return open_step_.has_value(); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_running() const { return static_cast<int>(running_.size()); }
  // Unfinished requests only (finished ones are forgotten once reported); nullptr otherwise.
  const RequestInfo* Find(RequestId id) const;
  const std::deque<RequestId>& waiting() const { return waiting_; }
  const std::vector<RequestId>& running() const { return running_; }  // admission order
  const KvBlockManager& kv() const { return kv_; }
  const SchedulerConfig& config() const { return config_; }
  const SchedulerStats& stats() const { return stats_; }

  // Queues and KV bookkeeping agree (tests and debug builds).
  Status CheckInvariants() const;

 private:
  int PrefillTokens(const RequestInfo& r) const { return r.prompt_tokens + r.generated; }
  // The budget a prefill chunk of `rows` rows after `prefix` cached keys spends in `segment`
  // (-1: a dense chunk, every layer; rows when nothing is priced but rows), and the most rows
  // after `prefix` that `budget` pays for (>= 1 when budget > 0; at most MaxChunkRows).
  // `free_rows` of them cost no linear work (FreeRows: the step already pays for them).
  int ChunkCost(int segment, int prefix, int rows, int free_rows = 0) const;
  int RowsWithin(int segment, int prefix, int budget, int free_rows = 0) const;
  // The same at price c (rows capped at `cap`).
  static int PricedChunkCost(const SegmentCost& c, int prefix, int rows, int free_rows = 0);
  static int PricedRowsWithin(const SegmentCost& c, int prefix, int budget, int cap,
                              int free_rows = 0);
  // The rows a chunk of `segment` (-1: every layer) can add to the plan for no linear work:
  // with decodes in the plan, each segment's layers cost at least weight_floor_rows rows
  // (SchedulerConfig::weight_floor_rows), so the rows below that floor are paid already; the
  // fewest over the segments the chunk runs. `self` (a chunk being grown) is not counted as the
  // plan's. 0 without decodes or a floor.
  int FreeRows(const StepPlan& plan, int segment, const ScheduledRequest* self = nullptr) const;
  // Rows of the budget the plan pays for segments' weights beyond the rows that run them (the
  // floor's slack summed over segments at their shares; 0 without decodes or a floor).
  double WeightFloorSlack(const StepPlan& plan) const;
  // weight_floor_rows, at most a quarter of max_batched_tokens: with the decodes' keys (at most
  // half) a step's decodes leave prefills at least a quarter of the budget.
  double WeightFloor() const;
  // The price of a row and of a cached key in `segment` (-1: the whole model's).
  SegmentCost Price(int segment) const;
  // Whether a dense prefill runs segment-wise (SchedulerConfig::dense_segment_chunks): chunked,
  // segment-wise chunks on, more than one segment, each priced at its share (unpriced, a
  // segment's chunk would cost as much as an all-layer one and the prompt take n_segments times
  // the steps), and the prefill does not `fits` the step whole.
  bool DenseSegmentWise(bool fits) const;
  // Whether each segment has its own price (SchedulerConfig::segment_costs), as Price reads it.
  bool PricedPerSegment() const {
    return config_.segment_costs.size() == static_cast<size_t>(kv_.n_segments());
  }
  // The most rows one chunk runs: the largest step budget (the device graphs and activation
  // buffers are sized for it), though a cheap segment's chunk may cost less than its rows.
  int MaxChunkRows() const {
    return std::max(config_.max_batched_tokens, config_.prefill_only_tokens);
  }
  // What a scheduled request spends (decodes: 1), and what the plan leaves of the step's budget
  // (prefill_only_tokens when the plan holds no decodes).
  int Cost(const ScheduledRequest& s) const;
  // A decode's keys, in rows of the budget (SchedulerConfig::decode_key_cost; 0 for chunks). A
  // step's decodes spend at most half of max_batched_tokens on them (BudgetLeft).
  double DecodeKeysCost(const ScheduledRequest& s) const;
  int BudgetLeft(const StepPlan& plan) const;
  // Rows the plan leaves of MaxChunkRows: a step runs no more rows than its largest budget,
  // however cheap its segment-wise chunks are (activation memory is sized by it).
  int RowsLeft(const StepPlan& plan) const;
  // The linear work a prefill has left, in rows of the budget (Price(s).linear_share per row of
  // segment s; later segments counted at the current segment's rows: selection only shrinks
  // them), so that a segment-wise prefill, a dense one and a waiting prompt compare in one unit.
  // Counting a segment-wise prefill's rows once per segment made every equal waiting prompt look
  // shorter than it and split the budget with it (a 4 x 32K served run: the second prompt's
  // TTFT 1.96 s after the first's, dense 1.39 s).
  double PrefillWorkLeft(const RequestInfo& r) const;
  // The same for a waiting request not yet admitted: its whole prefill, segment-wise when
  // AdmitWaiting would cut it so.
  double WaitingPrefillWork(const RequestInfo& r) const;
  // Whether chunk s earns a place in the plan (SchedulerConfig::min_extra_chunk_rows).
  bool WorthItsOwnUnit(const StepPlan& plan, const ScheduledRequest& s) const;
  void ScheduleDecodes(StepPlan& plan);
  // The next chunk of r's chunked prefill that `budget` pays for (ChunkCost), of at most
  // max_rows rows.
  ScheduledRequest NextChunk(const RequestInfo& r, int budget, int max_rows,
                             int free_rows = 0) const;
  void ContinueChunkedPrefills(StepPlan& plan);
  void TopUpChunkedPrefills(StepPlan& plan);
  // SchedulerConfig::linear_row_tile: the step's last chunk that neither ends its segment nor its
  // prompt gives up the rows past the last whole tile of its layers' rows when its rows per cost
  // rise.
  void AlignStepRows(StepPlan& plan);
  // SchedulerConfig::tile_overshoot: that chunk (a whole number of query tiles) one tile longer
  // when the step's price lands nearer its budget, at most tile_overshoot over it.
  void RoundChunkToNearestTile(StepPlan& plan);
  void AdmitWaiting(StepPlan& plan);
  void Preempt(RequestId id, StepPlan& plan);
  void Finish(RequestId id, FinishReason reason, std::vector<FinishedRequest>& out);
  Status ValidateResults(std::span<const RequestStepResult> results) const;

  SchedulerConfig config_;
  KvBlockManager kv_;
  std::unordered_map<RequestId, RequestInfo> requests_;  // unfinished requests
  std::deque<RequestId> waiting_;   // FCFS; preempted requests go back to the front
  std::vector<RequestId> running_;  // admission order (newest last: the preemption victim)
  std::optional<StepPlan> open_step_;
  std::vector<FinishedRequest> aborted_;  // finished outside a step, reported by OnStepDone
  RequestId next_id_ = 0;
  SchedulerStats stats_;
};

}  // namespace uniprefill
