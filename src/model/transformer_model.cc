// The one layer walk: the recipe of model_definition.h, step by step on the model's backend.
#include "model/transformer_model.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "dist/communicator.h"
#include "dist/shard_definition.h"
#include "model/model_presets.h"
#include "ops/cpu/cpu_quant_lanes_i16.h"

namespace uniprefill {

// Runs one walk step: marks its phase on the backend (LayerBackend::MarkPhase), and with
// stats->time_phases waits for the backend and adds the step's wall time to its phase
// (benchmarks' breakdown of a forward).
class PhaseClock {
 public:
  PhaseClock(LayerBackend& backend, ForwardStats* stats)
      : backend_(backend), stats_(stats && stats->time_phases ? stats : nullptr) {}

  template <typename Step>
  auto Run(WalkPhase phase, Step&& step) -> decltype(step()) {
    // Begin lays the forward out (a device backend's trace opens there): marks follow it.
    if (phase != WalkPhase::kBegin) {
      if (Status st = backend_.MarkPhase(phase); !st.ok()) return st;
    }
    if (!stats_) return step();
    const auto start = std::chrono::steady_clock::now();
    auto result = step();
    if (!result.ok()) return result;
    if (Status st = backend_.Synchronize(); !st.ok()) return st;
    stats_->phase_s[static_cast<size_t>(phase)] +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
  }

 private:
  LayerBackend& backend_;
  ForwardStats* stats_;
};

Status TransformerModel::ForwardBatch(DeviceContext& ctx, std::span<const SequenceStep> steps,
                                      const UniPrefillConfig& uniprefill,
                                      const ProgressFn& progress, ForwardStats* stats) {
  // `uniprefill` was validated when it was made (the engine at load and at each request,
  // ValidateUniPrefillConfig); the walk trusts it.
  const std::vector<int> drops = uniprefill.active_drop_layers();
  const int n_segments = CacheLayoutFor(drops).n_segments;
  PhaseClock clock(*backend_, stats);
  Result<bool> any_rows = clock.Run(WalkPhase::kBegin, [&] {
    return backend_->Begin(ctx, steps, uniprefill, n_segments, stats);
  });
  if (!any_rows.ok()) {
    backend_->Abandon();
    return any_rows.status();
  }
  if (!*any_rows) return OkStatus();
  const Status st = Walk(steps, uniprefill, drops, progress, stats, clock);
  if (!st.ok()) backend_->Abandon();
  return st;
}

Status TransformerModel::Walk(std::span<const SequenceStep> steps,
                              const UniPrefillConfig& uniprefill, const std::vector<int>& drops,
                              const ProgressFn& progress, ForwardStats* stats, PhaseClock& clock) {
  const ModelConfig& c = def_->config;
  // A communicator means tensor parallel at any world size: a world of one runs the same steps
  // (its all-reduces sum one rank), so it tests the N-rank path on one device.
  const bool tensor_parallel = comm_ != nullptr;
  UP_RETURN_IF_ERROR(clock.Run(WalkPhase::kEmbed, [&] { return backend_->Embed(); }));
  if (tensor_parallel && def_->vocab_sharded()) UP_RETURN_IF_ERROR(backend_->ReduceOut(*comm_));
  size_t next_drop = 0;
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerDefinition& L = def_->layers[i];
    UP_RETURN_IF_ERROR(
        clock.Run(WalkPhase::kNorm, [&] { return backend_->NormInput(i, NormSlot::kMixer); }));
    if (L.attention) {
      DropLayer drop;
      const bool is_drop = next_drop < drops.size() && drops[next_drop] == i;
      if (is_drop) {
        drop.layer = i;
        drop.config = &uniprefill;
        drop.steps = steps;
        drop.stats = stats;
        drop.comm = tensor_parallel ? comm_ : nullptr;
        ++next_drop;
      }
      // Past the last layer only each request's last row is read (the head's), so there its
      // other rows only cache their keys and values (QueryRows::kLastOfEach; at a drop layer,
      // after the selection).
      const QueryRows queries = i + 1 == c.n_layers && !last_layer_every_row_
                                    ? QueryRows::kLastOfEach
                                    : QueryRows::kEvery;
      UP_RETURN_IF_ERROR(
          clock.Run(is_drop ? WalkPhase::kDropAttention : WalkPhase::kAttention,
                    [&] { return backend_->Attention(i, is_drop ? &drop : nullptr, queries); }));
    } else {
      UP_RETURN_IF_ERROR(clock.Run(WalkPhase::kDeltaNet, [&] { return backend_->DeltaNet(i); }));
    }
    if (tensor_parallel) UP_RETURN_IF_ERROR(backend_->ReduceOut(*comm_));
    if (!L.post_mixer_norm.empty()) {
      UP_RETURN_IF_ERROR(clock.Run(WalkPhase::kNorm,
                                   [&] { return backend_->NormOutput(i, NormSlot::kPostMixer); }));
    }
    const bool was_drop = next_drop > 0 && drops[next_drop - 1] == i;
    if (was_drop) {
      UP_RETURN_IF_ERROR(clock.Run(WalkPhase::kExchange, [&] {
        return backend_->ExchangeSegmentRows(static_cast<int>(next_drop));
      }));
    }
    UP_RETURN_IF_ERROR(
        clock.Run(WalkPhase::kNorm, [&] { return backend_->NormInput(i, NormSlot::kFfn); }));
    if (L.moe) {
      UP_RETURN_IF_ERROR(clock.Run(WalkPhase::kMoe, [&] { return backend_->Moe(i); }));
    } else {
      UP_RETURN_IF_ERROR(clock.Run(WalkPhase::kFfn, [&] { return backend_->GatedFfn(i); }));
    }
    if (tensor_parallel) UP_RETURN_IF_ERROR(backend_->ReduceOut(*comm_));
    if (!L.post_ffn_norm.empty()) {
      UP_RETURN_IF_ERROR(
          clock.Run(WalkPhase::kNorm, [&] { return backend_->NormOutput(i, NormSlot::kPostFfn); }));
    }
    if (progress) progress(i + 1, c.n_layers);
  }
  return clock.Run(WalkPhase::kFinish, [&] { return backend_->Finish(); });
}

std::vector<SegmentCost> TransformerModel::SegmentCosts(const std::vector<int>& drop_layers) const {
  // FLOPs per key over FLOPs per row, times how much slower the backend runs attention FLOPs,
  // plus its per-key work on the prefix in every full-attention layer.
  std::vector<SegmentCost> costs = uniprefill::SegmentCosts(*def_, drop_layers);
  if (!last_layer_every_row_) PriceLastLayerRowsOnly(*def_, drop_layers, &costs);
  const PrefixAttentionCost backend = backend_->PrefixAttentionCosts();
  const double per_row = LinearPrefillFlops(*def_, 1);
  // The floor assumes a dense layer, whose few rows stream all of its weights; through an MoE
  // layer they stream only the experts they route to (a number that grows with the rows), which
  // one floor in rows does not describe: MoE models leave it unpriced.
  const bool any_moe = std::any_of(def_->layers.begin(), def_->layers.end(),
                                   [](const LayerDefinition& L) { return L.moe.has_value(); });
  for (SegmentCost& c : costs) {
    c.key_cost *= backend.slowdown;
    c.window_key_cost *= backend.slowdown;
    c.query_tile_rows = std::max(1, backend.query_tile_rows);
    c.weight_floor_rows = any_moe ? 0.0 : backend.weight_floor_rows;
    c.min_extra_chunk_rows = backend.min_extra_chunk_rows;
    c.linear_row_tile = backend.linear_row_tile;
    c.tile_overshoot = backend.tile_overshoot;
    if (per_row > 0) {
      c.prefix_key_cost = c.full_attention_layers * backend.copy_flops_per_key / per_row;
      c.decode_key_cost = c.full_attention_layers * backend.decode_flops_per_key / per_row;
    }
  }
  return costs;
}

namespace {

// The Q8_0 lanes kernel's block sums, made once for every weight it reads (a batched decode
// step's head, above all: ops::cpu::AttachBlockQuantSums); counted as host copies. Reading a
// weight for its sums faults in all of its mapped file pages, which a prefill would otherwise
// touch only at its end, after its largest buffers are gone (Gemma 3's 178 MB head: peak RSS at
// 16K 616 -> 836 MiB), so they are given back after (DropMappedRange).
void AttachCpuBlockQuantSums(ModelDefinition& d, CpuIsa isa) {
  std::vector<ops::LinearWeight*> weights = {&d.head};
  for (LayerDefinition& L : d.layers) {
    for (ops::LinearWeight* w : L.LinearWeights()) weights.push_back(w);
  }
  for (ops::LinearWeight* w : weights) {
    ops::cpu::AttachBlockQuantSums(*w, isa);
    for (size_t p = 0; p < w->block_quant_sums.size(); ++p) {
      if (w->block_quant_sums[p].empty()) continue;
      d.host_copy_bytes += w->block_quant_sums[p].size() * sizeof(int16_t);
      const TensorView& part = w->parts[p];
      DropMappedRange(d, part.data, static_cast<size_t>(DTypeBytes(part.dtype, part.numel())));
    }
  }
}

}  // namespace

Result<bool> LastLayerEveryRow(const LoadOptions& options) {
  const char* env = std::getenv("UNIPREFILL_LAST_LAYER_EVERY_ROW");
  if (env == nullptr || *env == '\0') return options.last_layer_every_row;
  const std::string v = env;
  if (v == "1") return true;
  if (v == "0") return false;
  return InvalidArgument("UNIPREFILL_LAST_LAYER_EVERY_ROW='" + v +
                         "': use 1 (the last layer runs every row, as before the 36th session) "
                         "or 0 (only each request's last row; the default)");
}

Result<std::unique_ptr<Model>> MakeModel(ModelDefinition definition, DeviceContext& ctx,
                                         const LoadOptions& options) {
  // (Read first: a bad value fails before any weight is copied or uploaded.)
  UP_ASSIGN_OR_RETURN(const bool every_row, LastLayerEveryRow(options));
  dist::Communicator* comm = options.communicator;
  if (comm != nullptr) {  // world 1 too: the whole model as its one shard, the same path
    const bool gpu = ctx.device() == Device::kCuda;
    if (gpu && !comm->device_collectives()) {
      return Unimplemented("tensor parallelism on the GPU needs device collectives (NCCL); " +
                           comm->Describe() + " has none");
    }
    UP_ASSIGN_OR_RETURN(dist::ShardPlan plan,
                        dist::PlanShards(definition.config, comm->rank(), comm->world_size()));
    dist::ShardCopies copies;
    // A GPU rank uploads bf16 weights of its own: f32 host copies would only cost host memory
    // (they did: 2x the rank's layers in f32, found by CudaTensorParallelTest's device bytes).
    copies.f32_prefill = options.f32_prefill_weights && !gpu;
    if (options.int16_prefill_gemm && !options.f32_decode) copies.unless_int16_gemm = ctx.cpu_isa();
    copies.dequantise_on_call = ctx.cpu_isa();
    UP_ASSIGN_OR_RETURN(definition,
                        dist::ShardDefinition(std::move(definition), plan, copies,
                                              /*split_vocabulary=*/true));
  }
  UP_RETURN_IF_ERROR(definition.Check());
  if (ctx.device() == Device::kCpu) AttachCpuBlockQuantSums(definition, ctx.cpu_isa());
  auto def = std::make_unique<const ModelDefinition>(std::move(definition));
  std::unique_ptr<LayerBackend> backend;
  if (ctx.device() == Device::kCuda) {
    UP_ASSIGN_OR_RETURN(backend, MakeCudaBackend(*def, ctx, options));
  } else {
    UP_ASSIGN_OR_RETURN(backend, MakeCpuBackend(*def));
  }
  if (comm != nullptr) {
    UP_RETURN_IF_ERROR(backend->SetTensorParallel(comm));
  }
  // A rank copied its row-parallel slices out of the file (touching the other ranks' columns too)
  // and a GPU model uploaded every weight: the file pages touched so far are mostly dead weight
  // in the resident set (measured in docs/scaling.md). A single CPU process reads its weights in
  // place, so it keeps them.
  if (comm != nullptr || ctx.device() == Device::kCuda) DropMappedPages(*def);
  auto model = std::make_unique<TransformerModel>(std::move(def), std::move(backend), comm);
  model->set_kv_dtype(options.cpu_kv_dtype);
  model->set_last_layer_every_row(every_row);
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace uniprefill
