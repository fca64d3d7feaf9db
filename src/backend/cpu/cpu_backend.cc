// The CPU backend (cpu_backend.h): the walk's steps as f32 host ops over a PackedBatch, whose
// residual stream x the attention block compacts at drop layers.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "dist/communicator.h"
#include "model/blocks/sequence_rows.h"
#include "ops/ops.h"

namespace uniprefill {
namespace {

// A request's boundary rows on the host: f32 [capacity, hidden].
class HostBoundaryRows final : public BoundaryStorage {
 public:
  HostBoundaryRows(int capacity, int hidden)
      : x(sizeof(float) * std::max<size_t>(1, size_t(capacity) * hidden)) {}
  size_t bytes() const override { return x.size(); }
  float* row(int i, int hidden) { return x.as<float>() + static_cast<size_t>(i) * hidden; }
  Buffer x;
};

HostBoundaryRows& HostRows(BoundaryRows& b) { return static_cast<HostBoundaryRows&>(*b.data); }

class CpuBackend final : public LayerBackend {
 public:
  explicit CpuBackend(const ModelDefinition& def) : def_(def), c_(def.config) {}

  Device device() const override { return Device::kCpu; }
  size_t resident_weight_bytes() const override { return 0; }
  std::unique_ptr<SequenceCache> NewCache(const CacheLayout& layout,
                                          int max_tokens) const override {
    return std::make_unique<ContiguousSequenceCache>(layout, max_tokens);
  }
  Status FixCachePool(const CacheLayout&, int, int) override { return OkStatus(); }

  Result<bool> Begin(DeviceContext& ctx, std::span<const SequenceStep> steps,
                     const UniPrefillConfig& uniprefill, int n_segments,
                     ForwardStats* stats) override {
    // Drop timings are recorded by the attention block through DropLayer; Finish counts the
    // head's rows here.
    stats_ = stats;
    for (size_t r = 0; r < steps.size(); ++r) {
      if (steps[r].sampling) {
        return InvalidArgument("request " + std::to_string(r) +
                               ": on-device sampling (SequenceStep::sampling) needs a CUDA "
                               "model; sample the host logits instead");
      }
    }
    ctx_ = &ctx;
    steps_ = steps;
    window_mode_ = uniprefill.window_mode;
    UP_ASSIGN_OR_RETURN(batch_, PackedBatch::Build(steps, c_.vocab_size, c_.hidden, n_segments));
    has_out_ = false;
    return batch_.n_seqs() > 0;
  }

  bool supports_segment_chunks() const override { return true; }

  Status Embed() override {
    if (batch_.rows() == 0) return OkStatus();  // only later segments' chunks
    if (!def_.vocab_sharded()) {
      ops::Embedding(*ctx_, batch_.x(), def_.token_embedding.parts[0], batch_.token_ids().data(),
                     c_.embedding_scale);
      return OkStatus();
    }
    // Vocabulary-parallel: this rank embeds the tokens in its rows into out (x stays zero), the
    // walk sums out over the ranks and NormInput adds it to x.
    NewOut();
    std::vector<int32_t> rows, local_ids;
    const std::vector<int32_t>& ids = batch_.token_ids();
    for (int r = 0; r < batch_.rows(); ++r) {
      if (ids[r] >= def_.vocab_begin && ids[r] < def_.vocab_end) {
        rows.push_back(r);
        local_ids.push_back(static_cast<int32_t>(ids[r] - def_.vocab_begin));
      }
    }
    if (rows.empty()) return OkStatus();
    const int64_t n = static_cast<int64_t>(rows.size());
    Buffer mine(sizeof(float) * n * c_.hidden);
    ops::Embedding(*ctx_, mine.View(DType::kF32, {n, c_.hidden}), def_.token_embedding.parts[0],
                   local_ids.data(), c_.embedding_scale);
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(out_.as<float>() + static_cast<int64_t>(rows[i]) * c_.hidden,
                  mine.as<float>() + i * c_.hidden, sizeof(float) * c_.hidden);
    }
    return OkStatus();
  }

  Status NormInput(int layer, NormSlot slot) override {
    AddPendingOutput();
    normed_ = Buffer(sizeof(float) * batch_.rows() * c_.hidden);
    if (batch_.rows() == 0) return OkStatus();
    ops::RmsNorm(*ctx_, Normed(), batch_.x(), Norm(layer, slot), c_.rms_eps);
    return OkStatus();
  }

  Status NormOutput(int layer, NormSlot slot) override {
    if (!has_out_) return OkStatus();
    ops::RmsNorm(*ctx_, Out(), Out(), Norm(layer, slot), c_.rms_eps);
    return OkStatus();
  }

  Status Attention(int layer, const DropLayer* drop, QueryRows queries) override {
    if (batch_.rows() == 0) {  // no rows in this segment yet: the drop only moves to the next
      if (drop != nullptr) batch_.NextSegment(*ctx_, {});
      return OkStatus();
    }
    has_out_ = true;
    return AttentionForward(*ctx_, *def_.layers[layer].attention, layer, batch_, Normed(), drop,
                            window_mode_, &out_, queries);
  }

  Status DeltaNet(int layer) override {
    // The recurrence runs per request over its alive rows, carrying its state.
    if (batch_.rows() == 0) return OkStatus();
    std::vector<SequenceRows> rows;
    std::vector<LinearAttentionState*> states;
    for (int r = 0; r < batch_.n_seqs(); ++r) {
      if (batch_.seq(r).rows() == 0) continue;  // a segment-wise chunk not in this segment
      rows.push_back({batch_.seq(r).begin, batch_.seq(r).end});
      states.push_back(batch_.seq(r).cache->Linear(layer));
    }
    NewOut();
    GatedDeltaNetForward(*ctx_, *def_.layers[layer].delta, Normed(), rows, states, Out());
    return OkStatus();
  }

  Status GatedFfn(int layer) override {
    if (batch_.rows() == 0) return OkStatus();
    NewOut();
    GatedFfnForward(*ctx_, *def_.layers[layer].ffn, Normed(), Out());
    return OkStatus();
  }

  Status Moe(int layer) override {
    if (batch_.rows() == 0) return OkStatus();
    NewOut();
    MoeForward(*ctx_, *def_.layers[layer].moe, Normed(), Out());
    return OkStatus();
  }

  Status ExchangeSegmentRows(int segment) override {
    if (!batch_.Exchanges(segment)) return OkStatus();
    AddPendingOutput();
    const int H = c_.hidden;
    std::vector<PackedBatch::EnteringRows> enter(batch_.n_seqs());
    for (int r = 0; r < batch_.n_seqs(); ++r) {
      const PackedBatch::Seq& q = batch_.seq(r);
      SegmentBoundary& b = q.cache->boundary();
      if (q.leaves >= 0 && q.leaves + 1 == segment) {
        BoundaryRows& out = b.collected;
        if (!out.data) {  // the segment's first chunk: room for all of its rows
          out.data = std::make_unique<HostBoundaryRows>(steps_[r].chunk->segment_rows, H);
          out.segment = segment;
        }
        std::memcpy(HostRows(out).row(out.rows(), H), batch_.x().row<float>(q.begin),
                    sizeof(float) * H * q.rows());
        out.pos.insert(out.pos.end(), batch_.positions() + q.begin, batch_.positions() + q.end);
        if (b.segment_ended) EndSegment(b, H);
      }
      if (q.enters == segment) {
        BoundaryRows& in = b.ready;
        const int n = steps_[r].chunk->rows;
        enter[r].x = HostRows(in).row(in.consumed, H);
        enter[r].pos = std::span<const int32_t>(in.pos).subspan(in.consumed, n);
        in.consumed += n;
      }
    }
    batch_.Exchange(enter);  // copies the entering rows
    for (int r = 0; r < batch_.n_seqs(); ++r) {
      BoundaryRows& in = batch_.seq(r).cache->boundary().ready;
      if (batch_.seq(r).enters == segment && in.consumed == in.rows()) in.Clear();
    }
    return OkStatus();
  }

  Status SetTensorParallel(dist::Communicator* comm) override {
    comm_ = comm;
    return OkStatus();
  }

  Status ReduceOut(dist::Communicator& comm) override {
    if (!has_out_ || batch_.rows() == 0) return OkStatus();
    return comm.AllReduce(out_.as<float>(), static_cast<int64_t>(batch_.rows()) * c_.hidden,
                          dist::ReduceOp::kSum);
  }

  Status Finish() override {
    AddPendingOutput();
    if (stats_ != nullptr) stats_->last_layer_rows += batch_.rows();
    // Logits of each request's last row (never dropped): final norm, then the head.
    std::vector<int32_t> last;
    std::vector<int> wanted;
    for (int r = 0; r < batch_.n_seqs(); ++r) {
      if (steps_[r].logits) {
        last.push_back(batch_.seq(r).end - 1);
        wanted.push_back(r);
      }
    }
    if (!last.empty()) {
      const int64_t R = static_cast<int64_t>(last.size()), H = c_.hidden, V = c_.vocab_size;
      if (stats_ != nullptr) stats_->head_rows += static_cast<int>(R);
      // f32 [R, V], kept across steps up to kKeptLogitsBytes (16 rows of Gemma 3's vocabulary):
      // a fresh mapping per step cost a page fault per 4 KB and the kernel's zeroing on every
      // batched decode step; larger steps (rare) take a buffer of their own.
      const size_t bytes = sizeof(float) * R * V;
      Buffer transient;
      if (bytes > kKeptLogitsBytes) {
        transient = Buffer(bytes);
      } else if (logits_.size() < bytes) {
        logits_ = Buffer(bytes);
      }
      Buffer& logits = bytes > kKeptLogitsBytes ? transient : logits_;
      Buffer h(sizeof(float) * R * H);
      TensorView hv = h.View(DType::kF32, {R, H});  // f32 [R, hidden]
      ops::GatherRows(*ctx_, hv, batch_.x(), last.data());
      ops::RmsNorm(*ctx_, hv, hv, def_.output_norm.data(), c_.rms_eps);
      if (!def_.vocab_sharded()) {
        ops::Linear(*ctx_, logits.View(DType::kF32, {R, V}), hv, def_.head);
      } else {
        // Vocabulary-parallel head: this rank's columns [R, V / N], gathered from every rank as
        // [N, R, V / N], then laid out as [R, V].
        if (comm_ == nullptr) return Internal("a vocabulary-split model without a communicator");
        const int64_t Vl = def_.vocab_end - def_.vocab_begin, N = comm_->world_size();
        Buffer mine(sizeof(float) * R * Vl), all(sizeof(float) * N * R * Vl);
        ops::Linear(*ctx_, mine.View(DType::kF32, {R, Vl}), hv, def_.head);
        UP_RETURN_IF_ERROR(comm_->AllGather(mine.data(), all.data(),
                                            static_cast<int64_t>(sizeof(float)) * R * Vl));
        for (int64_t q = 0; q < N; ++q) {
          for (int64_t i = 0; i < R; ++i) {
            std::memcpy(logits.as<float>() + i * V + q * Vl, all.as<float>() + (q * R + i) * Vl,
                        sizeof(float) * Vl);
          }
        }
      }
      for (int64_t i = 0; i < R; ++i) {
        std::memcpy(steps_[wanted[i]].logits, logits.as<float>() + i * V, sizeof(float) * V);
      }
    }
    batch_.Commit();
    normed_ = Buffer();
    out_ = Buffer();
    return OkStatus();
  }

 private:
  // The segment's last chunk left: its collected rows shrink to the kept ones and become the
  // rows the next segment's chunks enter with.
  static void EndSegment(SegmentBoundary& b, int hidden) {
    BoundaryRows& out = b.collected;
    if (!b.kept.empty()) {
      auto kept = std::make_unique<HostBoundaryRows>(static_cast<int>(b.kept.size()), hidden);
      std::vector<int32_t> pos(b.kept.size());
      for (size_t i = 0; i < b.kept.size(); ++i) {
        std::memcpy(kept->row(static_cast<int>(i), hidden), HostRows(out).row(b.kept[i], hidden),
                    sizeof(float) * hidden);
        pos[i] = out.pos[b.kept[i]];
      }
      out.data = std::move(kept);
      out.pos = std::move(pos);
    }
    out.consumed = 0;
    b.ready = std::move(out);
    b.collected.Clear();
    b.kept.clear();
    b.segment_ended = false;
  }

  const float* Norm(int layer, NormSlot slot) const {
    const LayerDefinition& L = def_.layers[layer];
    switch (slot) {
      case NormSlot::kMixer: return L.mixer_norm.data();
      case NormSlot::kPostMixer: return L.post_mixer_norm.data();
      case NormSlot::kFfn: return L.ffn_norm.data();
      case NormSlot::kPostFfn: return L.post_ffn_norm.data();
    }
    return nullptr;
  }
  TensorView Normed() const { return normed_.View(DType::kF32, {batch_.rows(), c_.hidden}); }
  TensorView Out() const { return out_.View(DType::kF32, {batch_.rows(), c_.hidden}); }
  void NewOut() {
    out_ = Buffer(sizeof(float) * batch_.rows() * c_.hidden);
    has_out_ = true;
  }
  void AddPendingOutput() {
    if (has_out_) ops::Add(*ctx_, batch_.x(), batch_.x(), Out());
    has_out_ = false;
  }

  const ModelDefinition& def_;
  const ModelConfig& c_;
  // The forward in progress.
  DeviceContext* ctx_ = nullptr;
  std::span<const SequenceStep> steps_;
  ForwardStats* stats_ = nullptr;  // this forward's, or nullptr
  WindowMode window_mode_ = WindowMode::kAliveIndex;
  PackedBatch batch_;
  Buffer normed_;  // f32 [rows, hidden]: the current block's normalised input
  dist::Communicator* comm_ = nullptr;  // tensor parallel (not owned)
  Buffer out_;     // f32 [rows, hidden]: the last block's output, not yet added to x
  bool has_out_ = false;
  static constexpr size_t kKeptLogitsBytes = size_t{16} << 20;
  Buffer logits_;  // f32 [rows, vocab]: the head's output, reused by the next steps
};

Status CheckMaterialised(const ops::LinearWeight& w, const std::string& what) {
  if (w.parts.empty()) {
    return InvalidArgument(what + " has no stored values (a random-weight model must be "
                           "materialised on the host to run on the CPU)");
  }
  return OkStatus();
}

}  // namespace

Result<std::unique_ptr<LayerBackend>> MakeCpuBackend(const ModelDefinition& def) {
  UP_RETURN_IF_ERROR(CheckMaterialised(def.token_embedding, "the token embedding"));
  UP_RETURN_IF_ERROR(CheckMaterialised(def.head, "the output head"));
  for (size_t i = 0; i < def.layers.size(); ++i) {
    const LayerDefinition& L = def.layers[i];
    const std::string where = "layer " + std::to_string(i);
    if (L.attention) {
      for (const ops::LinearWeight* w : {&L.attention->q, &L.attention->k, &L.attention->v,
                                         &L.attention->o}) {
        UP_RETURN_IF_ERROR(CheckMaterialised(*w, where + " attention"));
      }
    }
    if (L.delta) UP_RETURN_IF_ERROR(CheckMaterialised(L.delta->in_proj_qkvz, where + " DeltaNet"));
    if (L.ffn) UP_RETURN_IF_ERROR(CheckMaterialised(L.ffn->gate_up, where + " FFN"));
    if (L.moe) UP_RETURN_IF_ERROR(CheckMaterialised(L.moe->router, where + " MoE router"));
  }
  return std::unique_ptr<LayerBackend>(std::make_unique<CpuBackend>(def));
}

}  // namespace uniprefill
