// CudnnAttention (cudnn_attention.h): the cuDNN frontend's SDPA graph over ragged (packed) bf16
// sequences, with a padding mask for the sync-free drop's capacities, a diagonal band for sliding
// windows, and paged K/V read from the CUDA backend's KV pool; plans autotuned per shape bucket.
// Built without cuDNN, Create says so and callers keep FlashAttention.
#include "ops/cuda/cudnn_attention.h"

#include <cstdint>
#include <vector>

#ifdef UNIPREFILL_WITH_CUDNN
// The frontend loads libcudnn (and NVRTC, for engines we do not use) at run time: the binary runs
// on machines without cuDNN, where Create says so, and the frontend checks the library's version
// before using newer features (the headers may be newer than the machine's library).
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include <dlfcn.h>

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>

#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#endif

#ifdef UNIPREFILL_WITH_CUDNN
// The frontend's dynamic loading reads libcudnn's symbols through this handle, which it declares
// and leaves to its user to define and open (CudnnAttention::Create); process-wide by its design.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}
#endif

namespace uniprefill::ops::cuda {

const char* CudnnSdpaImplementationName(CudnnSdpaImplementation impl) {
  switch (impl) {
    case CudnnSdpaImplementation::kAuto:
      return "auto";
    case CudnnSdpaImplementation::kComposite:
      return "composite";
    case CudnnSdpaImplementation::kUnified:
      return "unified";
  }
  return "?";
}

std::vector<int32_t> RaggedOffsets(const std::vector<int32_t>& row_begin, int64_t row_stride) {
  std::vector<int32_t> out(row_begin.size());
  for (size_t b = 0; b < row_begin.size(); ++b) {
    out[b] = static_cast<int32_t>(row_begin[b] * row_stride);
  }
  return out;
}

#ifndef UNIPREFILL_WITH_CUDNN

Result<std::unique_ptr<CudnnAttention>> CudnnAttention::Create(DeviceContext&,
                                                              const CudnnOptions&) {
  return Unimplemented(
      "this uniprefill was built without cuDNN (cudnn.h, libcudnn and the cuDNN frontend headers "
      "were not found at configure time); use the engine's own attention kernel");
}

#else

namespace {

namespace fe = cudnn_frontend;

// Tensor uids of the graphs' inputs and outputs.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kSeqLen, kQOff, kKOff, kVOff, kOOff, kSeqLenKv, kPageTable, kStats
};

enum class Kind : int64_t { kSelf, kPaged, kPrefix };

// What a graph is specialised to. Self: the strides are the views' row strides. Paged: k_stride
// is the pool's kv_dim, and the pool's size and the block table's width are part of the shape.
// Prefix: keys have their own row bucket (max_kv_rows), a causal mask or none, stats or none.
struct GraphKey {
  Kind kind = Kind::kSelf;
  int64_t batch = 0, max_rows = 0, hq = 0, hkv = 0, d = 0;
  int64_t q_stride = 0, k_stride = 0, v_stride = 0, o_stride = 0;
  int64_t window = 0;  // 0: causal only
  int64_t num_blocks = 0, block_tokens = 0, max_blocks = 0;
  int64_t block_stride = 0;  // paged: elements from one block's K rows to the next block's
  int64_t max_kv_rows = 0;
  bool causal = true, stats = false;
  uint32_t scale_bits = 0;
  auto tie() const {
    return std::tie(kind, batch, max_rows, hq, hkv, d, q_stride, k_stride, v_stride, o_stride,
                    window, num_blocks, block_tokens, max_blocks, block_stride, max_kv_rows,
                    causal, stats, scale_bits);
  }
  bool operator<(const GraphKey& o) const { return tie() < o.tie(); }
};

struct BuiltGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t plan = -1;  // the plan index that runs; -1: the heuristics' choice (no autotune)
  int64_t workspace = 0;
};

using Pack = std::unordered_map<int64_t, void*>;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// The padded length a graph is built for: the next power of two (at least 64), so a server sees
// few distinct graphs.
int64_t Bucket(int64_t rows) {
  int64_t b = 64;
  while (b < rows) b *= 2;
  return b;
}

// The caller's fixed bucket when it gives one (it must hold `rows`), else the power of two.
Result<int64_t> BucketOr(int64_t given, int64_t rows, const char* what) {
  if (given <= 0) return Bucket(rows);
  if (given < rows) {
    return InvalidArgument(std::string("cuDNN attention: ") + what + " below the longest sequence");
  }
  return given;
}

Status FromFe(fe::error_t e, const char* what) {
  if (e.is_good()) return OkStatus();
  return Unimplemented(std::string("cuDNN attention: ") + what + ": " + e.get_message());
}

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// An int32 [n, 1, 1, 1] graph input (sequence lengths, ragged offsets).
TensorPtr IntColumn(fe::graph::Graph& g, const char* name, int64_t uid, int64_t n) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({n, 1, 1, 1})
                      .set_stride({1, 1, 1, 1})
                      .set_data_type(fe::DataType_t::INT32));
}

// bf16 [batch, heads, rows, d] with rows `stride` elements apart and heads d apart (a packed,
// possibly column-sliced row layout); sequences start at their ragged offsets (int32 [b + 1]).
// rows: the bucket of rows per sequence (0: key.max_rows).
TensorPtr RaggedRows(fe::graph::Graph& g, const char* name, int64_t uid, const GraphKey& key,
                     int64_t heads, int64_t stride, TensorPtr ragged, int64_t rows = 0) {
  const int64_t s = rows > 0 ? rows : key.max_rows, d = key.d;
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({key.batch, heads, s, d})
                      .set_stride({s * stride, d, stride, 1})
                      .set_ragged_offset(std::move(ragged)));
}

// The output O like RaggedRows, from the sdpa node's output.
void RaggedOutput(fe::graph::Graph& g, const TensorPtr& o, const GraphKey& key) {
  const int64_t s = key.max_rows;
  o->set_output(true)
      .set_uid(kO)
      .set_dim({key.batch, key.hq, s, key.d})
      .set_stride({s * key.o_stride, key.d, key.o_stride, 1})
      .set_ragged_offset(IntColumn(g, "o_offsets", kOOff, key.batch + 1));
}

// Self-attention of packed prompts: causal from the top left of each sequence (query row i sees
// key rows j <= i), with a window the band's left bound W (j > i - W; our AttentionParams rule).
void DefineSelf(fe::graph::Graph& g, const GraphKey& key, float scale,
                fe::AttentionImplementation_t impl) {
  const int64_t b = key.batch;
  auto q = RaggedRows(g, "Q", kQ, key, key.hq, key.q_stride, IntColumn(g, "q_off", kQOff, b + 1));
  auto k = RaggedRows(g, "K", kK, key, key.hkv, key.k_stride, IntColumn(g, "k_off", kKOff, b + 1));
  auto v = RaggedRows(g, "V", kV, key, key.hkv, key.v_stride, IntColumn(g, "v_off", kVOff, b + 1));
  auto seq_len = IntColumn(g, "seq_len", kSeqLen, b);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("prefill")
                     .set_implementation(impl)
                     .set_generate_stats(false)
                     .set_attn_scale(scale)
                     .set_padding_mask(true)
                     .set_seq_len_q(seq_len)
                     .set_seq_len_kv(seq_len)
                     .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                     .set_diagonal_band_right_bound(0);
  if (key.window > 0) options.set_diagonal_band_left_bound(static_cast<int>(key.window));
  auto [o, stats] = g.sdpa(q, k, v, options);
  (void)stats;
  RaggedOutput(g, o, key);
}

// Queries over a cached prefix in contiguous rows: like DefineSelf with keys of their own lengths
// and bucket, causal aligned bottom-right (query row i of a sequence with n queries over L keys
// sees keys j <= L - n + i), or unmasked (a piece of a split prefix); with key.stats the
// log-sum-exp f32 [batch, hq, max_rows, 1] too.
void DefinePrefix(fe::graph::Graph& g, const GraphKey& key, float scale,
                  fe::AttentionImplementation_t impl) {
  const int64_t b = key.batch, kv = key.max_kv_rows;
  auto q = RaggedRows(g, "Q", kQ, key, key.hq, key.q_stride, IntColumn(g, "q_off", kQOff, b + 1));
  auto k = RaggedRows(g, "K", kK, key, key.hkv, key.k_stride, IntColumn(g, "k_off", kKOff, b + 1),
                      kv);
  auto v = RaggedRows(g, "V", kV, key, key.hkv, key.v_stride, IntColumn(g, "v_off", kVOff, b + 1),
                      kv);
  auto options = fe::graph::SDPA_attributes()
                     .set_name(key.causal ? "prefix_rows" : "prefix_piece")
                     .set_implementation(impl)
                     .set_generate_stats(key.stats)
                     .set_attn_scale(scale)
                     .set_padding_mask(true)
                     .set_seq_len_q(IntColumn(g, "q_len", kSeqLen, b))
                     .set_seq_len_kv(IntColumn(g, "kv_len", kSeqLenKv, b));
  if (key.causal) {
    options.set_diagonal_alignment(fe::DiagonalAlignment_t::BOTTOM_RIGHT)
        .set_diagonal_band_right_bound(0);
  }
  auto [o, stats] = g.sdpa(q, k, v, options);
  RaggedOutput(g, o, key);
  if (key.stats) {
    const int64_t s = key.max_rows;
    stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({b, key.hq, s, 1})
        .set_stride({key.hq * s, s, 1, 1});
  }
}

// Queries over paged caches: K and V containers are views of the KV pool (block_stride apart per
// block: K | V interleaved per block, or CudaKvPool's planes), one block table for both; causal
// aligned bottom-right (query row i of a sequence with n queries over L entries sees entries
// j <= L - n + i).
void DefinePaged(fe::graph::Graph& g, const GraphKey& key, float scale,
                 fe::AttentionImplementation_t impl) {
  const int64_t b = key.batch, bt = key.block_tokens, kvd = key.k_stride, d = key.d;
  auto q = RaggedRows(g, "Q", kQ, key, key.hq, key.q_stride, IntColumn(g, "q_off", kQOff, b + 1));
  auto container = [&](const char* name, int64_t uid) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({key.num_blocks, key.hkv, bt, d})
                        .set_stride({key.block_stride, d, kvd, 1})
                        .set_data_type(fe::DataType_t::BFLOAT16));
  };
  auto k = container("K_pool", kK);
  auto v = container("V_pool", kV);
  auto table = g.tensor(fe::graph::Tensor_attributes()
                            .set_name("block_table")
                            .set_uid(kPageTable)
                            .set_dim({b, 1, key.max_blocks, 1})
                            .set_stride({key.max_blocks, key.max_blocks, 1, 1})
                            .set_data_type(fe::DataType_t::INT32));
  auto options = fe::graph::SDPA_attributes()
                     .set_name("prefix")
                     .set_implementation(impl)
                     .set_generate_stats(false)
                     .set_attn_scale(scale)
                     .set_padding_mask(true)
                     .set_seq_len_q(IntColumn(g, "q_len", kSeqLen, b))
                     .set_seq_len_kv(IntColumn(g, "kv_len", kSeqLenKv, b))
                     .set_diagonal_alignment(fe::DiagonalAlignment_t::BOTTOM_RIGHT)
                     .set_diagonal_band_right_bound(0)
                     .set_paged_attention_k_table(table)
                     .set_paged_attention_v_table(table)
                     .set_paged_attention_max_seq_len_kv(static_cast<int>(key.max_blocks * bt));
  auto [o, stats] = g.sdpa(q, k, v, options);
  (void)stats;
  RaggedOutput(g, o, key);
}

// Milliseconds of one run of plan `index` on `stream` (events), or < 0 when it fails.
double TimePlanOnce(const fe::graph::Graph& g, cudnnHandle_t handle, Pack& pack, void* workspace,
                    int64_t index, cudaStream_t stream) {
  cudaEvent_t ev[2] = {nullptr, nullptr};
  float ms = -1;
  if (cudaEventCreate(&ev[0]) == cudaSuccess && cudaEventCreate(&ev[1]) == cudaSuccess) {
    cudaEventRecord(ev[0], stream);
    const bool ok = g.execute_plan_at_index(handle, pack, workspace, index).is_good();
    cudaEventRecord(ev[1], stream);
    if (cudaEventSynchronize(ev[1]) != cudaSuccess || !ok ||
        cudaEventElapsedTime(&ms, ev[0], ev[1]) != cudaSuccess) {
      ms = -1;
    }
  }
  for (cudaEvent_t e : ev) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  return ms;
}

class CudnnAttentionImpl final : public CudnnAttention {
 public:
  CudnnAttentionImpl(cudnnHandle_t handle, const CudnnOptions& options)
      : handle_(handle), options_(options) {}
  ~CudnnAttentionImpl() override { fe::detail::destroy_handle(handle_); }

  Status Run(DeviceContext& ctx, TensorView out, TensorView q, TensorView k, TensorView v,
             const CudnnVarlen& batch, const AttentionParams& params) override {
    if (params.window < 0) return InvalidArgument("cuDNN attention: negative window");
    if (batch.batch <= 0) return OkStatus();
    GraphKey key;
    key.kind = Kind::kSelf;
    key.batch = batch.batch;
    UP_ASSIGN_OR_RETURN(key.max_rows, BucketOr(batch.rows_bucket, batch.max_rows, "rows_bucket"));
    key.hq = q.dim(1);
    key.hkv = k.dim(1);
    key.d = q.dim(2);
    key.q_stride = q.stride[0];
    key.k_stride = k.stride[0];
    key.v_stride = v.stride[0];
    key.o_stride = out.stride[0];
    // A window no shorter than the bucket masks nothing beyond causality: share the causal graph.
    key.window = params.window >= key.max_rows ? 0 : params.window;
    key.scale_bits = FloatBits(params.scale);
    Pack pack = {{kQ, q.data},
                 {kK, k.data},
                 {kV, v.data},
                 {kO, out.data},
                 {kSeqLen, const_cast<int32_t*>(batch.seq_len)},
                 {kQOff, const_cast<int32_t*>(batch.q_offsets)},
                 {kKOff, const_cast<int32_t*>(batch.k_offsets)},
                 {kVOff, const_cast<int32_t*>(batch.v_offsets)},
                 {kOOff, const_cast<int32_t*>(batch.o_offsets)}};
    return Execute(ctx, key, params.scale, pack);
  }

  Status RunPaged(DeviceContext& ctx, TensorView out, TensorView q, TensorView kv, int hkv,
                  const CudnnPagedBatch& batch, const AttentionParams& params) override {
    if (params.window != 0) return Unimplemented("cuDNN attention: windows over paged caches");
    if (batch.batch <= 0) return OkStatus();
    if (kv.ndim != 4 || kv.dim(1) != 2 || int64_t{hkv} * q.dim(2) > kv.dim(3)) {
      return InvalidArgument("cuDNN attention: kv must be bf16 [blocks, 2, block_tokens, kv_dim]");
    }
    GraphKey key;
    key.kind = Kind::kPaged;
    key.batch = batch.batch;
    key.max_rows = Bucket(batch.max_q_rows);
    key.hq = q.dim(1);
    key.hkv = hkv;
    key.d = q.dim(2);
    key.q_stride = q.stride[0];
    key.k_stride = key.v_stride = kv.dim(3);
    key.o_stride = out.stride[0];
    key.num_blocks = kv.dim(0);
    key.block_tokens = kv.dim(2);
    key.max_blocks = batch.max_blocks;
    key.block_stride = kv.stride[0];
    key.scale_bits = FloatBits(params.scale);
    uint16_t* pool = static_cast<uint16_t*>(kv.data);
    Pack pack = {{kQ, q.data},
                 {kK, pool},
                 {kV, pool + kv.stride[1]},  // V: the same block's V rows
                 {kO, out.data},
                 {kSeqLen, const_cast<int32_t*>(batch.q_len)},
                 {kSeqLenKv, const_cast<int32_t*>(batch.kv_len)},
                 {kQOff, const_cast<int32_t*>(batch.q_offsets)},
                 {kOOff, const_cast<int32_t*>(batch.o_offsets)},
                 {kPageTable, const_cast<int32_t*>(batch.block_table)}};
    return Execute(ctx, key, params.scale, pack);
  }

  Status RunPrefix(DeviceContext& ctx, TensorView out, TensorView q, TensorView k, TensorView v,
                   const CudnnPrefixBatch& batch, const AttentionParams& params) override {
    if (params.window != 0) return Unimplemented("cuDNN attention: windows over a cached prefix");
    if (batch.batch <= 0) return OkStatus();
    GraphKey key;
    key.kind = Kind::kPrefix;
    key.batch = batch.batch;
    UP_ASSIGN_OR_RETURN(key.max_rows,
                        BucketOr(batch.q_rows_bucket, batch.max_q_rows, "q_rows_bucket"));
    UP_ASSIGN_OR_RETURN(key.max_kv_rows,
                        BucketOr(batch.kv_rows_bucket, batch.max_kv_rows, "kv_rows_bucket"));
    key.hq = q.dim(1);
    key.hkv = k.dim(1);
    key.d = q.dim(2);
    key.q_stride = q.stride[0];
    key.k_stride = k.stride[0];
    key.v_stride = v.stride[0];
    key.o_stride = out.stride[0];
    key.causal = batch.causal;
    key.stats = batch.stats != nullptr;
    key.scale_bits = FloatBits(params.scale);
    Pack pack = {{kQ, q.data},
                 {kK, k.data},
                 {kV, v.data},
                 {kO, out.data},
                 {kSeqLen, const_cast<int32_t*>(batch.q_len)},
                 {kSeqLenKv, const_cast<int32_t*>(batch.kv_len)},
                 {kQOff, const_cast<int32_t*>(batch.q_offsets)},
                 {kKOff, const_cast<int32_t*>(batch.k_offsets)},
                 {kVOff, const_cast<int32_t*>(batch.v_offsets)},
                 {kOOff, const_cast<int32_t*>(batch.o_offsets)}};
    if (batch.stats != nullptr) pack[kStats] = batch.stats;
    return Execute(ctx, key, params.scale, pack);
  }

  std::vector<CudnnPlanTiming> PlanTimings() const override { return timings_; }

 private:
  // Builds the bucket's graph on its first call (failures remembered), then runs its plan.
  Status Execute(DeviceContext& ctx, const GraphKey& key, float scale, Pack& pack) {
    if (fe::detail::set_stream(handle_, ctx.cuda().stream()) != CUDNN_STATUS_SUCCESS) {
      return Internal("cuDNN attention: cudnnSetStream failed");
    }
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      if (failed_.count(key)) return Unavailable("cuDNN attention: this shape failed before");
      BuiltGraph built;
      Status st = BuildOrReport(ctx, key, scale, pack, &built);
      if (!st.ok()) {
        failed_.insert(key);
        return st;
      }
      it = graphs_.emplace(key, std::move(built)).first;
    }
    const BuiltGraph& g = it->second;
    UP_RETURN_IF_ERROR(EnsureWorkspace(g.workspace));
    fe::error_t e = g.plan < 0 ? g.graph->execute(handle_, pack, workspace_.data())
                                     : g.graph->execute_plan_at_index(handle_, pack,
                                                                      workspace_.data(), g.plan);
    if (e.is_good()) return OkStatus();
    return Internal(std::string("cuDNN attention: execute: ") + e.get_message());
  }

  Status EnsureWorkspace(int64_t bytes) {
    if (workspace_.size() >= static_cast<size_t>(bytes)) return OkStatus();
    workspace_ = DeviceBuffer();
    UP_ASSIGN_OR_RETURN(workspace_, DeviceBuffer::Allocate(bytes));
    return OkStatus();
  }

  // Builds the graph with each implementation options_ allows (UNIFIED first), keeps the one
  // whose chosen plan is fastest (without autotune: the first that builds) and reports every
  // implementation's plans in timings_; the first failure when none builds.
  Status BuildOrReport(DeviceContext& ctx, const GraphKey& key, float scale, Pack& pack,
                       BuiltGraph* built) {
    using Impl = CudnnSdpaImplementation;
    std::vector<Impl> candidates;
    if (options_.implementation != Impl::kComposite) candidates.push_back(Impl::kUnified);
    if (options_.implementation != Impl::kUnified) candidates.push_back(Impl::kComposite);
    struct Outcome {
      BuiltGraph graph;
      std::vector<CudnnPlanTiming> plans;
      double ms = 0;  // the chosen plan's (0 without autotune)
    };
    std::vector<Outcome> outcomes;
    Status first_error;
    for (Impl impl : candidates) {
      Outcome o;
      Status st;
      try {  // the frontend's loader throws when the machine's cuDNN lacks a symbol
        st = Build(ctx, key, scale, pack, impl, &o.graph);
      } catch (const std::exception& e) {
        st = Unimplemented(std::string("cuDNN attention: ") + e.what());
      }
      if (!st.ok()) {
        if (first_error.ok()) first_error = st;
        continue;
      }
      for (CudnnPlanTiming t : timings_) {
        if (t.chosen) o.ms = t.ms;
        t.name = std::string(CudnnSdpaImplementationName(impl)) + " " + t.name;
        o.plans.push_back(std::move(t));
      }
      outcomes.push_back(std::move(o));
      if (!options_.autotune) break;
    }
    if (outcomes.empty()) return first_error;
    const auto best =
        std::min_element(outcomes.begin(), outcomes.end(),
                         [](const Outcome& x, const Outcome& y) { return x.ms < y.ms; });
    timings_.clear();
    for (Outcome& o : outcomes) {
      for (CudnnPlanTiming& t : o.plans) {
        t.chosen = t.chosen && &o == &*best;
        timings_.push_back(std::move(t));
      }
    }
    *built = std::move(best->graph);
    return OkStatus();
  }

  Status Build(DeviceContext& ctx, const GraphKey& key, float scale, Pack& pack,
               CudnnSdpaImplementation implementation, BuiltGraph* built) {
    const fe::AttentionImplementation_t impl =
        implementation == CudnnSdpaImplementation::kUnified
            ? fe::AttentionImplementation_t::UNIFIED
            : fe::AttentionImplementation_t::COMPOSITE;
    timings_.clear();
    auto graph = std::make_shared<fe::graph::Graph>();
    graph->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    switch (key.kind) {
      case Kind::kSelf:
        DefineSelf(*graph, key, scale, impl);
        break;
      case Kind::kPaged:
        DefinePaged(*graph, key, scale, impl);
        break;
      case Kind::kPrefix:
        DefinePrefix(*graph, key, scale, impl);
        break;
    }
    UP_RETURN_IF_ERROR(FromFe(graph->validate(), "validate"));
    UP_RETURN_IF_ERROR(FromFe(graph->build_operation_graph(handle_), "operation graph"));
    std::vector<fe::HeurMode_t> modes = {fe::HeurMode_t::A};
    if (options_.autotune) modes.push_back(fe::HeurMode_t::B);
    if (options_.autotune && options_.fallback_plans) modes.push_back(fe::HeurMode_t::FALLBACK);
    UP_RETURN_IF_ERROR(FromFe(graph->create_execution_plans(modes), "execution plans"));
    if (options_.autotune && options_.sweep_knobs) AddKnobVariants(*graph);
    UP_RETURN_IF_ERROR(FromFe(graph->check_support(handle_), "support"));
    if (!options_.autotune) {
      UP_RETURN_IF_ERROR(FromFe(graph->build_plans(handle_), "build plans"));
      UP_RETURN_IF_ERROR(FromFe(graph->get_workspace_size(built->workspace), "workspace"));
      built->graph = std::move(graph);
      return OkStatus();
    }
    UP_RETURN_IF_ERROR(FromFe(graph->build_plans(fe::BuildPlanPolicy_t::ALL), "build plans"));
    UP_RETURN_IF_ERROR(Autotune(ctx, *graph, pack, built));
    const fe::error_t ws = graph->get_workspace_size_plan_at_index(built->plan, built->workspace);
    UP_RETURN_IF_ERROR(FromFe(ws, "workspace"));
    built->graph = std::move(graph);
    return OkStatus();
  }

  // Beside each heuristic engine's config, the configs that differ from it in one knob (every
  // value of each knob with at most 64 choices): a sweep the heuristics' short list may miss.
  // Configs the engine rejects fail to build and are reported as failed plans.
  static void AddKnobVariants(fe::graph::Graph& g) {
    std::set<int64_t> engines;
    const int64_t heuristic_plans = g.get_execution_plan_count();
    for (int64_t i = 0; i < heuristic_plans; ++i) {
      int64_t engine = -1;
      std::unordered_map<fe::KnobType_t, int64_t> base;
      if (!g.get_engine_and_knobs_at_index(i, engine, base).is_good()) continue;
      if (!engines.insert(engine).second) continue;
      std::vector<fe::Knob> knobs;
      if (!g.get_knobs_for_engine(engine, knobs).is_good()) continue;
      for (const fe::Knob& knob : knobs) {
        const int64_t stride = std::max<int64_t>(knob.stride, 1);
        if ((knob.maxValue - knob.minValue) / stride >= 64) continue;
        for (int64_t v = knob.minValue; v <= knob.maxValue; v += stride) {
          auto variant = base;
          auto it = variant.find(knob.type);
          if (it != variant.end() && it->second == v) continue;
          variant[knob.type] = v;
          (void)g.create_execution_plan(engine, variant);  // a rejected config is just not added
        }
      }
    }
  }

  // Times every built plan once on the call's own tensors (the output is written, then written
  // again by the real run) and keeps the fastest. Plans the heuristics list twice are timed once.
  Status Autotune(DeviceContext& ctx, const fe::graph::Graph& g, Pack& pack, BuiltGraph* built) {
    UP_RETURN_IF_ERROR(EnsureWorkspace(g.get_autotune_workspace_size()));
    cudaStream_t stream = ctx.cuda().stream();
    timings_.clear();
    std::set<std::string> seen;
    int best = -1;
    for (int64_t i = 0; i < g.get_execution_plan_count(); ++i) {
      CudnnPlanTiming t;
      if (!g.get_plan_name_at_index(i, t.name).is_good() || !seen.insert(t.name).second) continue;
      t.ms = TimePlanOnce(g, handle_, pack, workspace_.data(), i, stream);  // warm-up
      if (t.ms >= 0) {
        t.ms = std::min(TimePlanOnce(g, handle_, pack, workspace_.data(), i, stream),
                        TimePlanOnce(g, handle_, pack, workspace_.data(), i, stream));
      }
      if (t.ms >= 0 && (best < 0 || t.ms < timings_[best].ms)) {
        best = static_cast<int>(timings_.size());
        built->plan = i;
      }
      timings_.push_back(std::move(t));
    }
    if (best < 0) return Unimplemented("cuDNN attention: no plan ran");
    timings_[best].chosen = true;
    return OkStatus();
  }

  cudnnHandle_t handle_;
  CudnnOptions options_;
  std::map<GraphKey, BuiltGraph> graphs_;
  std::set<GraphKey> failed_;            // buckets cuDNN has no plan for
  std::vector<CudnnPlanTiming> timings_;  // the latest autotuned bucket's plans
  DeviceBuffer workspace_;
};

}  // namespace

Result<std::unique_ptr<CudnnAttention>> CudnnAttention::Create(DeviceContext& ctx,
                                                              const CudnnOptions& options) {
  (void)ctx;
  if (cudnn_frontend::cudnn_dlhandle == nullptr) {
    cudnn_frontend::cudnn_dlhandle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
  }
  if (cudnn_frontend::cudnn_dlhandle == nullptr) {
    return Unimplemented(std::string("cuDNN attention: cannot load libcudnn.so.9 (") + dlerror() +
                         "); install cuDNN 9 or use the engine's own attention kernel");
  }
  // The frontend reaches the CUDA runtime through libcudart.so.12 / .13 by name; this binary links
  // the runtime statically, so point it at the toolkit's copy when the loader cannot find one.
  if (std::getenv("CUDNN_FRONTEND_CUDART_LIB_NAME") == nullptr) {
    for (const char* path : {"libcudart.so.13", "/usr/local/cuda/lib64/libcudart.so.13",
                             "/usr/local/cuda/targets/x86_64-linux/lib/libcudart.so.13",
                             "libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so.12"}) {
      if (void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD)) {
        dlclose(h);
        break;  // already loaded: the frontend's own search finds it
      }
      if (void* h = dlopen(path, RTLD_NOW)) {
        dlclose(h);
        setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", path, /*overwrite=*/0);
        break;
      }
    }
  }
  cudnnHandle_t handle = nullptr;
  cudnnStatus_t st = CUDNN_STATUS_NOT_INITIALIZED;
  try {  // the frontend's loader throws when a symbol is missing
    st = fe::detail::create_handle(&handle);
  } catch (const std::exception& e) {
    return Unimplemented(std::string("cuDNN attention: ") + e.what());
  }
  if (st != CUDNN_STATUS_SUCCESS) {
    return Unimplemented(std::string("cuDNN attention: cudnnCreate failed (") +
                         fe::detail::get_error_string(st) + ")");
  }
  return std::unique_ptr<CudnnAttention>(std::make_unique<CudnnAttentionImpl>(handle, options));
}

#endif

}  // namespace uniprefill::ops::cuda
