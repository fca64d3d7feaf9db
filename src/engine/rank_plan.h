// RankPlan: what every tensor-parallel rank runs in one serving step, as rank 0's BatchEngine
// decided it (issue 21, "serving under TP"). Only rank 0 runs the scheduler and the sampler; the
// other ranks (BatchEngine::Follow) receive this plan each step and run the identical forward on
// their shards and their own KV caches.
//
// What a plan carries is exactly what a follower cannot work out alone: which requests run, their
// input token ids (a decode's is the token rank 0 sampled last step, on the GPU or from host
// logits: followers never sample), the chunk / segment fields
// of the scheduler's ScheduledRequest, each request's selection parameters, the dense KV
// reservation of a prefill that starts, and the requests whose caches to drop (finished,
// aborted, preempted). Block ids are not sent: a follower's KvBlockManager makes the same
// allocations from the same counts, and ids are local to a rank's own arena.
//
// Wire format: little-endian PODs in a length-prefixed byte string (every rank runs the same
// build on the same kind of host); Decode checks every length and says where a malformed plan
// broke. Not for: logits, sampling state, or anything only rank 0 needs.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "dist/communicator.h"
#include "sparsity/token_selection.h"

namespace uniprefill {

enum class RankPlanKind : uint8_t {
  kStep = 1,      // run `requests` (after dropping `released`)
  kIdle = 2,      // nothing to run: rank 0 is alive and waiting for requests (a heartbeat)
  kShutdown = 3,  // rank 0 stops serving: followers return OK
};

struct RankPlanRequest {
  int64_t id = 0;  // the scheduler's request id on rank 0
  bool is_prefill = false;
  bool last_chunk = true;  // a prefill's last chunk, or a decode: the row whose logits are made
  bool allow_drop = false;  // SequenceStep::allow_drop
  bool selection_enabled = true;
  // > 0: a prefill starts (a new cache): reserve this many tokens in every segment, densely.
  int32_t reserve_tokens = 0;
  // ScheduledRequest's chunk fields (segment -1: every layer).
  int32_t num_tokens = 0;
  int32_t chunk_begin = 0;
  int32_t segment = -1;
  int32_t segment_rows = 0;
  sparsity::SelectionParams selection;
  std::vector<int32_t> tokens;  // this step's input ids (empty for a later segment's chunk)
  bool ends_segment() const { return segment >= 0 && chunk_begin + num_tokens == segment_rows; }
  bool operator==(const RankPlanRequest&) const = default;
};

struct RankPlan {
  RankPlanKind kind = RankPlanKind::kIdle;
  std::vector<int64_t> released;  // drop these requests' caches and KV blocks first
  std::vector<RankPlanRequest> requests;
  bool operator==(const RankPlan&) const = default;
};

std::vector<uint8_t> EncodeRankPlan(const RankPlan& plan);
// DataLoss naming the field when `bytes` is truncated, too long or holds an unknown kind.
Result<RankPlan> DecodeRankPlan(const std::vector<uint8_t>& bytes);

// Rank 0: broadcasts the plan's length, then its bytes (two Broadcast calls from root 0).
Status SendRankPlan(dist::Communicator& comm, const RankPlan& plan);
// Other ranks: the matching receive. Unavailable when rank 0 sent nothing within the
// communicator's timeout (rank 0 died or hangs).
Result<RankPlan> ReceiveRankPlan(dist::Communicator& comm);

}  // namespace uniprefill
