// CudaBackend::PrepareServing: cuDNN attention graphs keyed by the server's step budget and
// context, built and autotuned before the first request, and the price of a chunk's attention
// over its cached prefix measured on the kernel that will run it (ours on Hopper, else cuDNN's;
// with neither, chunks run the cache kernel and are priced by FLOPs alone).
//
// Why: each cuDNN graph is built and every plan timed on its first call (cudnn_attention.h). Keyed
// by powers of two of the query and prefix rows, a chunked 32K prefill meets five prefix graphs
// and a server meets them inside its steps: those steps stall for the builds (the dense run of
// issue 18's 4 x 32K load, the first on its server, missed the ITL goal; the UniPrefill run after
// it met it). Keyed by the budget (query rows) and the context (prefix rows), a model has one
// self-attention graph per attention shape and window, and one prefix graph per attention shape.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "core/cuda/stream_timing.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_glue_kernels.h"
#include "backend/cuda/device_views.h"
#include "backend/cuda/wgmma_attention_views.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "ops/cuda/gemm_algos.h"
#include "ops/cuda/cuda_paged_attention.h"

namespace uniprefill::cuda_backend {

namespace {

// The prefix length the prefix graphs are timed at when built (their plans serve every length up
// to the context): long enough to rank the plans the way long prompts' chunks run them.
constexpr int kWarmPrefixRows = 16384;

// The fastest of three runs of `work` on `stream`, in ms (after the warm-up the caller did).
template <typename Work>
Result<float> FastestMs(cudaStream_t stream, Work&& work) {
  UP_ASSIGN_OR_RETURN(const std::vector<float> ms, TimeRunsMs(stream, 3, work));
  return *std::min_element(ms.begin(), ms.end());
}

}  // namespace

int CudaBackend::ServeRowsBucket(int rows) const {
  for (int b : serve_rows_buckets_) {
    if (rows <= b) return b;
  }
  return 0;
}

Status CudaBackend::PrepareServing(int max_step_rows, int max_context) {
  if (max_step_rows < 1 || max_context < 1) {
    return InvalidArgument("PrepareServing: step rows and context must be positive");
  }
  const int step_rows = std::min(max_step_rows, max_context);
  if (serve_kv_bucket_ > 0 && serve_kv_bucket_ != max_context) {
    return InvalidArgument("PrepareServing: every step budget must share one context");
  }
  if (gemm_tune_ && gemm_tuned_rows_ == 0) UP_RETURN_IF_ERROR(TuneLinearGemms(step_rows));
  serve_kv_bucket_ = max_context;
  if (std::find(serve_rows_buckets_.begin(), serve_rows_buckets_.end(), step_rows) !=
      serve_rows_buckets_.end()) {
    return OkStatus();  // prepared before
  }
  serve_rows_buckets_.insert(
      std::upper_bound(serve_rows_buckets_.begin(), serve_rows_buckets_.end(), step_rows),
      step_rows);
  // Staging for forwards of these rows and up to kPresizedRequests requests at the full context
  // (Begin's bound without drops: ~18 MB a half for the 8B shape at 8192 rows and 131K), so
  // that a server's first busy seconds grow no half (pinned_staging.h); beyond it halves double.
  constexpr int kPresizedRequests = 16;
  UP_RETURN_IF_ERROR(staging_.Presize(
      static_cast<size_t>(cfg_.n_layers) *
          StagingIntsPerLayer(step_rows, kPresizedRequests, max_context,
                              pool_->block_tokens()) +
      static_cast<size_t>(4 * step_rows + 14 * kPresizedRequests + 144)));
  // And the activation and per-request buffers (a growth frees, which syncs, and allocates).
  UP_RETURN_IF_ERROR(EnsureWork(step_rows, kPresizedRequests));
  // Nothing to build or price without cuDNN or our Hopper kernel (the cache kernel has no graphs).
  if (!cudnn_ && !wgmma_attention_) return OkStatus();
  cudaStream_t stream = ctx_.cuda().stream();
  const int64_t R = step_rows;
  const int64_t K = std::min<int64_t>(max_context, std::max<int64_t>(R, kWarmPrefixRows));
  // A dense FFN's gate | up GEMM is the linear work PrefixAttentionCosts compares against.
  const DeviceLinear* ffn = nullptr;
  if (!slowdown_fixed_ && (slowdown_rows_ == 0 || step_rows < slowdown_rows_)) {
    for (const Layer& layer : layers_) {
      if (layer.gate_up.out > 0) {
        ffn = &layer.gate_up;
        break;
      }
    }
  }
  // One graph per distinct (heads, head dim, row layout, scale, window): warm each once.
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, float, int>> seen;
  for (const Layer& layer : layers_) {
    if (!layer.attention) continue;
    const AttentionLayer& L = *layer.attention;
    const AttentionWeights& a = *L.host;
    const int64_t Hq = a.n_heads, Hkv = a.n_kv_heads, D = a.head_dim;
    if (D != 64 && D != 128 && D != 256) continue;  // our kernel runs those
    if (!cudnn_ && !PrefixKernelsCover(D, a.window)) continue;  // no graph, no chunk kernel
    const int64_t width = L.qkv.out, qd = Hq * D, kvd = Hkv * D;
    const int64_t q_cols = a.gated_output ? 2 * qd : qd;
    if (!seen.emplace(Hq, Hkv, D, width, q_cols, a.scale, a.window).second) continue;

    // Nothing in flight (synced below); room for the copy measurement's block table too.
    UP_RETURN_IF_ERROR(staging_.Reserve(256 + K / pool_->block_tokens() + 8));
    // Zero rows of the step's layouts: qkv bf16 [R, width], attention out bf16 [R, Hq, D].
    UP_ASSIGN_OR_RETURN(DeviceBuffer qkv, DeviceBuffer::Allocate(R * width * 2));
    UP_ASSIGN_OR_RETURN(DeviceBuffer out, DeviceBuffer::Allocate(R * qd * 2));
    UP_CUDA_CHECK(cudaMemsetAsync(qkv.data(), 0, qkv.size(), stream));
    const TensorView q = Heads(Bf16(qkv), R, Hq, D, width);
    const TensorView k = Heads(Bf16(qkv, q_cols), R, Hkv, D, width);
    const TensorView v = Heads(Bf16(qkv, q_cols + kvd), R, Hkv, D, width);
    const TensorView attn = out.View(DType::kBF16, {R, Hq, D});
    ops::AttentionParams ap;
    ap.scale = a.scale;
    ap.window = a.window;
    const std::vector<int32_t> rows = {0, static_cast<int32_t>(R)};
    ops::cuda::CudnnVarlen vb;
    vb.batch = 1;
    vb.max_rows = vb.rows_bucket = static_cast<int>(R);
    UP_ASSIGN_OR_RETURN(vb.seq_len, staging_.Put(std::vector<int32_t>{vb.max_rows}, stream));
    UP_ASSIGN_OR_RETURN(vb.q_offsets, staging_.Put(ops::cuda::RaggedOffsets(rows, width), stream));
    vb.k_offsets = vb.v_offsets = vb.q_offsets;
    UP_ASSIGN_OR_RETURN(vb.o_offsets, staging_.Put(ops::cuda::RaggedOffsets(rows, qd), stream));
    if (cudnn_) CudnnRan(cudnn_->Run(ctx_, attn, q, k, v, vb, ap), "attention");
    if (PrefixKernelsCover(D, a.window)) {  // prefixes run full attention only
      UP_RETURN_IF_ERROR(WarmPrefixGraph(L, q, attn, vb, K, max_context, ffn));
      ffn = nullptr;  // measured on the first full-attention shape
    }
    // The buffers are freed at scope end: the stream must be done with them.
    UP_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return OkStatus();
}

Status CudaBackend::TuneLinearGemms(int step_rows) {
  // Served steps' rows, up to a 2048-row budget: past it (prefill-only steps, whole prefills)
  // GEMMs are large enough that the heuristic's first was within ~1% (24th session's sweep at
  // 1024-1536 rows), and timing 8192-row buckets would take a minute.
  constexpr int64_t kMaxTunedRows = 2048;
  std::vector<TensorView> weights;
  const auto add = [&](const DeviceLinear& l) {
    if (l.out > 0) weights.push_back(l.view());
  };
  for (const Layer& layer : layers_) {
    if (layer.attention) {
      add(layer.attention->qkv);
      add(layer.attention->o);
    }
    if (layer.delta) {
      add(layer.delta->in_proj);
      add(layer.delta->out_proj);
    }
    if (layer.moe) {
      add(layer.moe->shared_gate_up);
      add(layer.moe->shared_down);
    }
    add(layer.gate_up);
    add(layer.down);
  }
  ops::GemmTuneRows rows;
  rows.step = 64;
  rows.max_rows = std::min<int64_t>(step_rows, kMaxTunedRows);
  UP_ASSIGN_OR_RETURN(const ops::cuda::GemmTuneReport r,
                      ops::cuda::TuneGemms(ctx_, weights, rows));
  gemm_tuned_rows_ = rows.max_rows;
  std::fprintf(stderr,
               "GEMM tuning: %d weight shapes x %lld-row buckets to %lld rows in %.1f s: another "
               "algorithm kept for %d of %d, their sum %.3f -> %.3f ms\n",
               r.shapes, static_cast<long long>(rows.step), static_cast<long long>(rows.max_rows),
               r.seconds, r.kept_other, r.problems, r.first_ms, r.kept_ms);
  return OkStatus();
}

Status CudaBackend::WarmPrefixGraph(const AttentionLayer& L, const TensorView& q,
                                    const TensorView& attn, const ops::cuda::CudnnVarlen& vb,
                                    int64_t K, int max_context, const DeviceLinear* ffn) {
  cudaStream_t stream = ctx_.cuda().stream();
  const AttentionWeights& a = *L.host;
  const int64_t Hkv = a.n_kv_heads, D = a.head_dim, kv_dim = pool_->kv().dim(3);
  ops::AttentionParams ap;
  ap.scale = a.scale;
  // The R queries are the last of K cached keys, bf16 [2, K, kv_dim].
  const int64_t R = q.dim(0);
  UP_ASSIGN_OR_RETURN(DeviceBuffer prefix, DeviceBuffer::Allocate(2 * K * kv_dim * 2));
  UP_CUDA_CHECK(cudaMemsetAsync(prefix.data(), 0, prefix.size(), stream));
  const TensorView pk = Heads(Bf16(prefix), K, Hkv, D, kv_dim);
  const TensorView pv = Heads(Bf16(prefix, K * kv_dim), K, Hkv, D, kv_dim);
  ops::cuda::CudnnPrefixBatch pb;
  pb.batch = 1;
  pb.max_q_rows = pb.q_rows_bucket = static_cast<int>(R);
  pb.max_kv_rows = static_cast<int>(K);
  pb.kv_rows_bucket = max_context;
  UP_ASSIGN_OR_RETURN(pb.q_len, staging_.Put(std::vector<int32_t>{pb.max_q_rows}, stream));
  UP_ASSIGN_OR_RETURN(pb.kv_len, staging_.Put(std::vector<int32_t>{pb.max_kv_rows}, stream));
  pb.q_offsets = vb.q_offsets;
  pb.o_offsets = vb.o_offsets;
  const std::vector<int32_t> keys = {0, static_cast<int32_t>(K)};
  UP_ASSIGN_OR_RETURN(pb.k_offsets, staging_.Put(ops::cuda::RaggedOffsets(keys, kv_dim), stream));
  pb.v_offsets = pb.k_offsets;
  // cuDNN's prefix graph built and autotuned (with cuDNN loaded), then the price measured.
  const bool warmed =
      !cudnn_ || CudnnRan(cudnn_->RunPrefix(ctx_, attn, q, pk, pv, pb, ap), "prefix attention");
  if (warmed && ffn) {
    // PrefixAttentionCosts: this prefix attention's time per FLOP over the FFN GEMM's, same rows
    // (bf16 [R, hidden] in, [R, 2 F] out; R queries, the last of K keys: R K - R^2 / 2 pairs),
    // and the copy of K keys out of the pool (GatherCacheRows, as PrefixPrefill does).
    // Random operands: on zeros the tensor cores draw less power and run faster (a GEMM of
    // zeros measured ~1.3x its rate on data), which would misprice the keys.
    UP_ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::Allocate(R * ffn->in * 2));
    UP_ASSIGN_OR_RETURN(DeviceBuffer y, DeviceBuffer::Allocate(R * ffn->out * 2));
    ops::cuda::FillRandomBf16(ctx_, x.data(), R * ffn->in, 1, 1.0f);
    ops::cuda::FillRandomBf16(ctx_, q.data, R * q.stride[0], 2, 1.0f);  // q's rows, k, v too
    ops::cuda::FillRandomBf16(ctx_, prefix.data(), 2 * K * kv_dim, 3, 1.0f);
    // Priced with the kernel chunks will run: ours on Hopper where it covers the layer, else
    // cuDNN's (PrefixPrefill).
    const bool wgmma = HopperKernelCovers(D, a.window);
    ops::cuda::WgmmaAttentionProblem wp =
        WgmmaProblemOf(q, pk, pv, attn, ap.scale, wgmma_choices_);
    UP_ASSIGN_OR_RETURN(wp.seq_begin, staging_.Put(std::vector<int32_t>{0}, stream));
    wp.k_seq_begin = wp.seq_begin;
    wp.seq_len = pb.q_len;
    wp.k_seq_len = pb.kv_len;
    wp.batch = 1;
    wp.max_seqlen = static_cast<int>(R);
    const bool ours = wgmma && ops::cuda::WgmmaAttentionCovers(wp);
    if (!ours && !cudnn_) {  // chunks of this shape run the cache kernel: nothing to price
      UP_CUDA_CHECK(cudaStreamSynchronize(stream));  // before the buffers are freed
      return OkStatus();
    }
    const auto prefix_attention = [&]() -> Status {
      if (ours) {
        UP_CUDA_CHECK(ops::cuda::LaunchFlashAttentionWgmma(wp, stream));
        return OkStatus();
      }
      return cudnn_->RunPrefix(ctx_, attn, q, pk, pv, pb, ap);
    };
    const auto ffn_gemm = [&] {
      ops::cuda::Gemm(ctx_, y.View(DType::kBF16, {R, ffn->out}),
                      x.View(DType::kBF16, {R, ffn->in}), ffn->view());
      return OkStatus();
    };
    UP_ASSIGN_OR_RETURN(const float attn_ms, FastestMs(stream, prefix_attention));
    UP_ASSIGN_OR_RETURN(const float gemm_ms, FastestMs(stream, ffn_gemm));
    // The same GEMM on a few rows (a step's decodes alone) streams the weights and computes
    // next to nothing: the rows whose compute takes as long are the layers' weight floor, what a
    // layer run only by decodes costs (SchedulerConfig::weight_floor_rows).
    constexpr int64_t kFewRows = 8;
    float few_ms = 0;
    if (R > kFewRows) {
      const auto few_gemm = [&] {
        ops::cuda::Gemm(ctx_, y.View(DType::kBF16, {kFewRows, ffn->out}),
                        x.View(DType::kBF16, {kFewRows, ffn->in}), ffn->view());
        return OkStatus();
      };
      UP_ASSIGN_OR_RETURN(few_ms, FastestMs(stream, few_gemm));
    }
    // The copy: K keys of one sequence from pool blocks 0.. (whatever they hold) into prefix.
    const int bt = pool_->block_tokens();
    const int64_t copy_keys = std::min<int64_t>(K, int64_t{pool_->num_blocks()} * bt);
    float copy_ms = 0;
    double decode_ms_per_key = 0;  // one decode's attention per cached key, this layer
    if (copy_keys >= bt && kv_dim % 8 == 0) {
      const int blocks = static_cast<int>(copy_keys / bt);
      std::vector<int32_t> table(blocks);
      for (int b = 0; b < blocks; ++b) table[b] = b;
      UP_ASSIGN_OR_RETURN(const int32_t* d_table, staging_.Put(table, stream));
      UP_ASSIGN_OR_RETURN(const int32_t* d_begin,
                          staging_.Put({0, static_cast<int32_t>(blocks * bt)}, stream));
      const int64_t n = int64_t{blocks} * bt;
      const auto copy = [&] {
        GatherCacheRows(ctx_, Rows(Bf16(prefix), DType::kBF16, n, kv_dim, kv_dim),
                        Rows(Bf16(prefix, n * kv_dim), DType::kBF16, n, kv_dim, kv_dim),
                        pool_->kv(), d_table, blocks, d_begin, 1, static_cast<int>(n));
        return OkStatus();
      };
      UP_ASSIGN_OR_RETURN(const float ms, FastestMs(stream, copy));
      copy_ms = ms * static_cast<float>(K) / static_cast<float>(n);  // scaled to K keys
      // A decode over the same n keys (one query row, the paged kernel decodes run; its query
      // position past every key, whatever positions the pool holds, so all of them are read).
      if (!decodes_as_rows_) {
        UP_ASSIGN_OR_RETURN(const int32_t* d_len,
                            staging_.Put({static_cast<int32_t>(n)}, stream));
        UP_ASSIGN_OR_RETURN(const int32_t* d_pos,
                            staging_.Put({std::numeric_limits<int32_t>::max() / 2}, stream));
        ops::cuda::PagedDecodeBatch db;
        db.block_tables = d_table;
        db.max_blocks_per_seq = blocks;
        db.seq_lens = d_len;
        db.q_pos = d_pos;
        db.max_seq_len = static_cast<int>(n);
        UP_RETURN_IF_ERROR(Grow(decode_scratch_, ops::cuda::PagedDecodeAttentionScratchBytes(
                                                     ctx_, 1, static_cast<int>(a.n_heads),
                                                     static_cast<int>(Hkv), static_cast<int>(D),
                                                     static_cast<int>(n))));
        TensorView q1 = q, out1 = attn;
        q1.shape[0] = out1.shape[0] = 1;
        const auto decode = [&] {
          ops::cuda::PagedDecodeAttention(ctx_, out1, q1, pool_->kv(), pool_->coords(true), db,
                                          ap, decode_scratch_.data(), decode_scratch_.size());
          return OkStatus();
        };
        UP_ASSIGN_OR_RETURN(const float dms, FastestMs(stream, decode));
        decode_ms_per_key = dms / static_cast<double>(n);
      }
    }
    const double pairs = static_cast<double>(R) * K - 0.5 * static_cast<double>(R) * R;
    const double attn_flops = 4.0 * pairs * a.n_heads * D;
    const double gemm_flops = 2.0 * R * static_cast<double>(ffn->in) * ffn->out;
    if (attn_ms > 0 && gemm_ms > 0) {
      // Clamped: a disturbed measurement must not starve or flood the steps.
      const double gemm_ms_per_flop = gemm_ms / gemm_flops;
      prefix_cost_.slowdown = std::clamp((attn_ms / attn_flops) / gemm_ms_per_flop, 0.5, 4.0);
      // The scheduler prices chunks in whole query tiles of the kernel priced here.
      prefix_cost_.query_tile_rows = untiled_price_ ? 1 : ours ? kOurQueryTile : kCudnnQueryTile;
      // A chunk of less than a query tile beside another prompt's: a part-empty tile of CTAs
      // and the request's own attention launches in every layer (~3.5 ms a step on the H200 for
      // ~57 rows, the served step fit) for little work.
      prefix_cost_.min_extra_chunk_rows =
          small_pieces_ ? 0 : ours ? kOurQueryTile : kCudnnQueryTile;
      // cuBLASLt's bf16 GEMMs at these shapes run 128-row tiles (H200: one row past 1024 added
      // 2.6 ms to a 43 ms step of the 8B shape, bench step); opt-in until served.
      prefix_cost_.linear_row_tile = align_step_rows_ ? 128 : 0;
      // A chunk reads its prefix in place (PrefixPrefill: a prefill told to its cache
      // takes one run of blocks per layer), so the copy is not priced: it is what a fragmented
      // pool falls back to, measured and noted here.
      const double copy_flops_per_key = (copy_ms / K) / gemm_ms_per_flop;
      prefix_cost_.copy_flops_per_key = prefix_copy_ ? copy_flops_per_key : 0;
      prefix_cost_.decode_flops_per_key = decode_ms_per_key / gemm_ms_per_flop;
      const double floor_rows =
          std::clamp(static_cast<double>(R) * few_ms / gemm_ms, 0.0, static_cast<double>(R));
      prefix_cost_.weight_floor_rows = weight_floor_ ? floor_rows : 0.0;
      slowdown_rows_ = static_cast<int>(R);
      if (trace_) {
        trace_->Note("{\"attention_slowdown\": " + std::to_string(prefix_cost_.slowdown) +
                     ", \"fallback_copy_flops_per_key\": " +
                     std::to_string(copy_flops_per_key) + ", \"decode_flops_per_key\": " +
                     std::to_string(prefix_cost_.decode_flops_per_key) +
                     ", \"decode_us_per_1k_keys\": " +
                     std::to_string(decode_ms_per_key * 1e6) + ", \"weight_floor_rows\": " +
                     std::to_string(floor_rows) + ", \"weight_floor_priced\": " +
                     (weight_floor_ ? "true" : "false") + ", \"linear_row_tile\": " +
                     std::to_string(prefix_cost_.linear_row_tile) + ", \"tile_overshoot\": " +
                     std::to_string(prefix_cost_.tile_overshoot) + ", \"few_rows_gemm_ms\": " +
                     std::to_string(few_ms) + ", \"rows\": " + std::to_string(R) +
                     ", \"keys\": " + std::to_string(K) +
                     ", \"attention_ms\": " + std::to_string(attn_ms) + ", \"gemm_ms\": " +
                     std::to_string(gemm_ms) + ", \"copy_ms\": " + std::to_string(copy_ms) +
                     "}");
      }
    }
  }
  // cuDNN's split graphs only for the chunks cuDNN splits: our kernel splits keys itself.
  if (!HopperKernelCovers(D, a.window) || split_on_cudnn_) {
    UP_RETURN_IF_ERROR(WarmSplitGraphs(q, attn, pk, pv, K, ap));
  }
  UP_CUDA_CHECK(cudaStreamSynchronize(stream));  // before `prefix` is freed
  return OkStatus();
}

}  // namespace uniprefill::cuda_backend
