// BatchEngine::Follow: a tensor-parallel rank other than 0 while rank 0 serves. It never runs the
// scheduler or a sampler: each step it receives rank 0's plan (engine/rank_plan.h) and runs the
// identical forward on its shard, so the collectives inside the forward pair up with rank 0's.
//
// Its KV bookkeeping mirrors rank 0's from the plan alone: a prefill that starts reserves the same
// dense count (Allocate), a decode appends one token (AppendDecode), a prefill's last chunk
// commits its segments' kept counts (the same on every rank: the selection runs on all-reduced
// scores) and a decode releases its window, as Scheduler::OnStepDone does; released requests are
// freed first. The follower therefore holds the same requests and counts as rank 0's manager, in
// a pool of the same size (SizeServingKv), and never runs out where rank 0 did not. Block ids may
// differ: they only address this rank's own arena.
//
// On the GPU (issue 21) a follower's caches are its device model's own (Model::NewCache on the
// pool PrepareDeviceServing fixed to the same block count as rank 0's), the manager then only
// mirrors the counts, as rank 0's scheduler does for its device caches. Rank 0 samples (on the
// device or the host); a follower asks for no logits and no sampling (the vocabulary is whole on
// every GPU rank, so the head needs no collective) and learns the chosen tokens from the next
// plan's decode inputs, so its KV and DeltaNet state advance exactly as rank 0's.
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/engine_impl.h"
#include "engine/rank_plan.h"
#include "engine/serving_kv.h"
#include "kv/kv_arena.h"
#include "kv/kv_block_manager.h"
#include "kv/paged_sequence_cache.h"
#include "uniprefill/batch_engine.h"

namespace uniprefill {
namespace {

// A request as a follower holds it: its cache, and what its forward rows point at.
struct FollowedRequest {
  std::unique_ptr<SequenceCache> cache;
  std::vector<KeptTokens> kept;
  UniPrefillConfig selection;
  SegmentChunk chunk;
  std::vector<int32_t> tokens;
};

class Follower {
 public:
  // model, ctx and uniprefill (the server's UniPrefill settings) outlive the follower.
  Follower(Model& model, DeviceContext& ctx, const UniPrefillConfig& uniprefill, int context_size,
           const ServingKv& kv)
      : model_(model),
        ctx_(ctx),
        uniprefill_(uniprefill),
        context_size_(context_size),
        layout_(kv.layout),
        kv_(kv.spec, kv.size),
        on_device_(model.device() == Device::kCuda) {
    if (!on_device_) arena_ = std::make_unique<KvArena>(kv.layout, kv.size);
  }

  // Runs one step of rank 0's; an error means this rank can no longer follow.
  Status Run(RankPlan& plan) {
    for (int64_t id : plan.released) {
      requests_.erase(id);  // the cache before its blocks
      if (kv_.Contains(id)) UP_RETURN_IF_ERROR(kv_.Free(id));
    }
    const int64_t vocab = model_.config().vocab_size;
    int logit_rows = 0;
    // Rank 0 samples these rows; here (on the CPU) they only make the head's all-gather of a
    // vocabulary-split model run on every rank. A device model needs none.
    for (const RankPlanRequest& r : plan.requests) {
      logit_rows += r.last_chunk && !on_device_ ? 1 : 0;
    }
    logits_.resize(static_cast<size_t>(logit_rows * vocab));
    float* next_logits = logits_.data();
    std::vector<SequenceStep> steps;
    std::vector<FollowedRequest*> rows;
    for (RankPlanRequest& r : plan.requests) {
      UP_ASSIGN_OR_RETURN(FollowedRequest * f, Take(r));
      SequenceStep s;
      s.cache = f->cache.get();
      s.tokens = f->tokens;
      if (r.last_chunk && !on_device_) {
        s.logits = next_logits;
        next_logits += vocab;
      }
      s.kept = r.is_prefill ? &f->kept : nullptr;
      s.allow_drop = r.allow_drop;
      s.selection = &f->selection;
      if (r.segment >= 0) {
        f->chunk = SegmentChunk{r.segment, r.num_tokens, r.segment_rows, r.ends_segment()};
        s.chunk = &f->chunk;
      }
      steps.push_back(s);
      rows.push_back(f);
    }
    if (!steps.empty()) {
      UP_RETURN_IF_ERROR(model_.ForwardBatch(ctx_, steps, uniprefill_));
    }
    for (size_t i = 0; i < plan.requests.size(); ++i) {
      const RankPlanRequest& r = plan.requests[i];
      if (r.is_prefill && r.last_chunk) {
        std::vector<int> kept;
        for (int s = 0; s < rows[i]->cache->layout().n_segments; ++s) {
          kept.push_back(rows[i]->cache->segment_length(s));
        }
        UP_RETURN_IF_ERROR(kv_.CommitPrefill(r.id, kept));
      } else if (!r.is_prefill) {
        UP_RETURN_IF_ERROR(kv_.ReleaseWindow(r.id));
      }
    }
    return OkStatus();
  }

 private:
  // The request r runs, with its KV room for this step: a prefill that starts gets a fresh cache
  // on its dense reservation, a decode one more token.
  Result<FollowedRequest*> Take(RankPlanRequest& r) {
    if (r.reserve_tokens > 0) {
      if (kv_.Contains(r.id)) {
        return Internal("rank 0 starts request " + std::to_string(r.id) +
                        " again without releasing it");
      }
      UP_RETURN_IF_ERROR(
          kv_.Allocate(r.id, std::vector<int>(kv_.n_segments(), r.reserve_tokens)));
      FollowedRequest& f = requests_[r.id];
      f = FollowedRequest{};
      if (on_device_) {  // on the pool sized like rank 0's, as rank 0's device caches
        f.cache = model_.NewCache(context_size_, uniprefill_.active_drop_layers());
        f.cache->ExpectPrefill(r.reserve_tokens, !r.allow_drop);
      } else {
        f.cache = std::make_unique<PagedSequenceCache>(layout_, context_size_, &kv_, r.id,
                                                       arena_.get());
      }
    } else if (!r.is_prefill) {
      UP_RETURN_IF_ERROR(kv_.AppendDecode(r.id));
    }
    auto it = requests_.find(r.id);
    if (it == requests_.end()) {
      return Internal("rank 0's step runs request " + std::to_string(r.id) +
                      ", which this rank never started");
    }
    FollowedRequest& f = it->second;
    // The server's drop layers and window mode, with the request's own selection parameters.
    f.selection = uniprefill_;
    f.selection.enabled = r.selection_enabled;
    f.selection.selection = r.selection;
    f.tokens = std::move(r.tokens);
    return &f;
  }

  Model& model_;
  DeviceContext& ctx_;
  const UniPrefillConfig& uniprefill_;
  int context_size_;
  CacheLayout layout_;
  KvBlockManager kv_;
  bool on_device_;
  std::unique_ptr<KvArena> arena_;  // host models' K/V; a device model keeps its own
  std::unordered_map<int64_t, FollowedRequest> requests_;
  std::vector<float> logits_;  // f32 [rows sampled on rank 0, vocab], discarded
};

}  // namespace

Status BatchEngine::Follow(Engine& engine, const ServingOptions& options) {
  Engine::Impl& core = *engine.impl_;
  dist::Communicator* comm = core.comm.get();
  if (comm == nullptr || comm->world_size() < 2 || comm->rank() == 0) {
    return InvalidArgument("BatchEngine::Follow is for ranks other than 0 of a tensor-parallel "
                           "job; rank 0 (or a single process) serves with BatchEngine::Start");
  }
  UP_ASSIGN_OR_RETURN(ServingKv kv, SizeServingKv(*core.model, core.uniprefill, options));
  // The same device pool and kernel preparation as rank 0's BatchEngine::Start.
  UP_RETURN_IF_ERROR(
      PrepareDeviceServing(*core.model, kv, options, core.context_size).status());
  Follower follower(*core.model, *core.ctx, core.uniprefill, core.context_size, kv);
  const std::string me = "rank " + std::to_string(comm->rank()) + ": ";
  for (;;) {
    Result<RankPlan> plan = ReceiveRankPlan(*comm);
    if (!plan.ok()) {
      return Unavailable(me + "waiting for rank 0's next step: " + plan.status().message());
    }
    if (plan->kind == RankPlanKind::kShutdown) return OkStatus();
    if (plan->kind == RankPlanKind::kIdle) continue;
    if (Status st = follower.Run(*plan); !st.ok()) {
      return Unavailable(me + "running rank 0's step: " + st.message());
    }
  }
}

}  // namespace uniprefill
