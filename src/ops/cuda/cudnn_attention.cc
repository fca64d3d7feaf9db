// CudnnAttention (cudnn_attention.h): the cuDNN frontend's SDPA graph over ragged (packed) bf16
// sequences, with a padding mask for the sync-free drop's capacities. Built without cuDNN, Create
// says so and callers keep FlashAttention.
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

#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
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

std::vector<int32_t> RaggedOffsets(const std::vector<int32_t>& row_begin, int64_t row_stride) {
  std::vector<int32_t> out(row_begin.size());
  for (size_t b = 0; b < row_begin.size(); ++b) {
    out[b] = static_cast<int32_t>(row_begin[b] * row_stride);
  }
  return out;
}

#ifndef UNIPREFILL_WITH_CUDNN

Result<std::unique_ptr<CudnnAttention>> CudnnAttention::Create(DeviceContext&) {
  return Unimplemented(
      "this uniprefill was built without cuDNN (cudnn.h, libcudnn and the cuDNN frontend headers "
      "were not found at configure time); use the engine's own attention kernel");
}

#else

namespace {

namespace fe = cudnn_frontend;

// Tensor uids of the graph's inputs and outputs.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kSeqLen, kQOff, kKOff, kVOff, kOOff };

// What a graph is specialised to.
struct GraphKey {
  int64_t batch, max_rows, hq, hkv, d, q_stride, k_stride, v_stride, o_stride;
  uint32_t scale_bits;
  auto tie() const {
    return std::tie(batch, max_rows, hq, hkv, d, q_stride, k_stride, v_stride, o_stride,
                    scale_bits);
  }
  bool operator<(const GraphKey& o) const { return tie() < o.tie(); }
};

struct BuiltGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
};

// The padded length a graph is built for: the next power of two (at least 64), so a server sees
// few distinct graphs.
int64_t Bucket(int64_t rows) {
  int64_t b = 64;
  while (b < rows) b *= 2;
  return b;
}

Status FromFe(fe::error_t e, const char* what) {
  if (e.is_good()) return OkStatus();
  return Internal(std::string("cuDNN attention: ") + what + ": " + e.get_message());
}

class CudnnAttentionImpl final : public CudnnAttention {
 public:
  explicit CudnnAttentionImpl(cudnnHandle_t handle) : handle_(handle) {}
  ~CudnnAttentionImpl() override { fe::detail::destroy_handle(handle_); }

  Status Run(DeviceContext& ctx, TensorView out, TensorView q, TensorView k, TensorView v,
             const CudnnVarlen& batch, const AttentionParams& params) override {
    if (params.window != 0) return Unimplemented("cuDNN attention: sliding windows");
    if (batch.batch <= 0) return OkStatus();
    GraphKey key;
    key.batch = batch.batch;
    key.max_rows = Bucket(batch.max_rows);
    key.hq = q.dim(1);
    key.hkv = k.dim(1);
    key.d = q.dim(2);
    key.q_stride = q.stride[0];
    key.k_stride = k.stride[0];
    key.v_stride = v.stride[0];
    key.o_stride = out.stride[0];
    std::memcpy(&key.scale_bits, &params.scale, 4);
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      BuiltGraph built;
      UP_RETURN_IF_ERROR(BuildOrReport(key, params.scale, &built));
      it = graphs_.emplace(key, std::move(built)).first;
    }
    if (workspace_.size() < static_cast<size_t>(it->second.workspace)) {
      workspace_ = DeviceBuffer();
      UP_ASSIGN_OR_RETURN(workspace_, DeviceBuffer::Allocate(it->second.workspace));
    }
    if (fe::detail::set_stream(handle_, ctx.cuda().stream()) != CUDNN_STATUS_SUCCESS) {
      return Internal("cuDNN attention: cudnnSetStream failed");
    }
    std::unordered_map<int64_t, void*> pack = {
        {kQ, q.data},
        {kK, k.data},
        {kV, v.data},
        {kO, out.data},
        {kSeqLen, const_cast<int32_t*>(batch.seq_len)},
        {kQOff, const_cast<int32_t*>(batch.q_offsets)},
        {kKOff, const_cast<int32_t*>(batch.k_offsets)},
        {kVOff, const_cast<int32_t*>(batch.v_offsets)},
        {kOOff, const_cast<int32_t*>(batch.o_offsets)}};
    return FromFe(it->second.graph->execute(handle_, pack, workspace_.data()), "execute");
  }

  Status BuildOrReport(const GraphKey& key, float scale, BuiltGraph* built) {
    try {  // the frontend's loader throws when the machine's cuDNN lacks a symbol
      return Build(key, scale, built);
    } catch (const std::exception& e) {
      return Internal(std::string("cuDNN attention: ") + e.what());
    }
  }

 private:
  Status Build(const GraphKey& key, float scale, BuiltGraph* built) {
    auto graph = std::make_shared<fe::graph::Graph>();
    graph->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const int64_t b = key.batch, s = key.max_rows, d = key.d;
    auto offsets = [&](const char* name, int64_t uid) {
      return graph->tensor(fe::graph::Tensor_attributes()
                               .set_name(name)
                               .set_uid(uid)
                               .set_dim({b + 1, 1, 1, 1})
                               .set_stride({1, 1, 1, 1})
                               .set_data_type(fe::DataType_t::INT32));
    };
    // [batch, heads, rows, d] with rows `stride` elements apart and heads d apart (a packed,
    // possibly column-sliced row layout); sequences start at their ragged offsets.
    auto rows = [&](const char* name, int64_t uid, int64_t heads, int64_t stride,
                    std::shared_ptr<fe::graph::Tensor_attributes> ragged) {
      return graph->tensor(fe::graph::Tensor_attributes()
                               .set_name(name)
                               .set_uid(uid)
                               .set_dim({b, heads, s, d})
                               .set_stride({s * stride, d, stride, 1})
                               .set_ragged_offset(ragged));
    };
    auto q = rows("Q", kQ, key.hq, key.q_stride, offsets("q_offsets", kQOff));
    auto k = rows("K", kK, key.hkv, key.k_stride, offsets("k_offsets", kKOff));
    auto v = rows("V", kV, key.hkv, key.v_stride, offsets("v_offsets", kVOff));
    auto seq_len = graph->tensor(fe::graph::Tensor_attributes()
                                     .set_name("seq_len")
                                     .set_uid(kSeqLen)
                                     .set_dim({b, 1, 1, 1})
                                     .set_stride({1, 1, 1, 1})
                                     .set_data_type(fe::DataType_t::INT32));
    auto options = fe::graph::SDPA_attributes()
                       .set_name("prefill")
                       .set_generate_stats(false)
                       .set_attn_scale(scale)
                       .set_causal_mask(true)
                       .set_padding_mask(true)
                       .set_seq_len_q(seq_len)
                       .set_seq_len_kv(seq_len);
    auto [o, stats] = graph->sdpa(q, k, v, options);
    (void)stats;
    o->set_output(true)
        .set_uid(kO)
        .set_dim({b, key.hq, s, d})
        .set_stride({s * key.o_stride, d, key.o_stride, 1})
        .set_ragged_offset(offsets("o_offsets", kOOff));
    UP_RETURN_IF_ERROR(FromFe(graph->validate(), "validate"));
    UP_RETURN_IF_ERROR(FromFe(graph->build_operation_graph(handle_), "operation graph"));
    UP_RETURN_IF_ERROR(
        FromFe(graph->create_execution_plans({fe::HeurMode_t::A}), "execution plans"));
    UP_RETURN_IF_ERROR(FromFe(graph->check_support(handle_), "support"));
    UP_RETURN_IF_ERROR(FromFe(graph->build_plans(handle_), "build plans"));
    UP_RETURN_IF_ERROR(FromFe(graph->get_workspace_size(built->workspace), "workspace"));
    built->graph = std::move(graph);
    return OkStatus();
  }

  cudnnHandle_t handle_;
  std::map<GraphKey, BuiltGraph> graphs_;
  DeviceBuffer workspace_;
};

}  // namespace

Result<std::unique_ptr<CudnnAttention>> CudnnAttention::Create(DeviceContext& ctx) {
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
  return std::unique_ptr<CudnnAttention>(std::make_unique<CudnnAttentionImpl>(handle));
}

#endif

}  // namespace uniprefill::ops::cuda
