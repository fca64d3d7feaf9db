// DiagnosticsFromEnvironment (cuda_diagnostics.h).
#include "backend/cuda/cuda_diagnostics.h"

#include <cstdlib>
#include <string>

namespace uniprefill::cuda_backend {
namespace {

// A 0 / 1 variable: *on = (value == "1"); unset or empty leaves *on alone.
Status ReadFlag(const char* name, bool* on) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return OkStatus();
  const std::string s = v;
  if (s != "0" && s != "1") {
    return InvalidArgument(std::string(name) + " must be 0 or 1 (got '" + s + "')");
  }
  *on = s == "1";
  return OkStatus();
}

}  // namespace

Result<CudaDiagnostics> DiagnosticsFromEnvironment() {
  CudaDiagnostics d;
  UP_ASSIGN_OR_RETURN(d.trace, StepTrace::FromEnvironment());
  UP_RETURN_IF_ERROR(ReadFlag("UNIPREFILL_CUDA_SYNC_EVERY_FORWARD", &d.sync_every_forward));
  if (const char* v = std::getenv("UNIPREFILL_CUDA_ATTENTION_SLOWDOWN"); v && *v) {
    char* end = nullptr;
    const double x = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(x > 0 && x <= 16)) {
      return InvalidArgument(std::string("UNIPREFILL_CUDA_ATTENTION_SLOWDOWN must be a number in "
                                         "(0, 16] (got '") + v + "')");
    }
    d.attention_slowdown = x;
  }
  UP_RETURN_IF_ERROR(ReadFlag("UNIPREFILL_CUDA_PREFIX_COPY", &d.prefix_copy));
  UP_RETURN_IF_ERROR(ReadFlag("UNIPREFILL_CUDA_SPLIT_ON_CUDNN", &d.split_on_cudnn));
  UP_RETURN_IF_ERROR(ReadFlag("UNIPREFILL_CUDA_UNTILED_PRICE", &d.untiled_price));
  UP_RETURN_IF_ERROR(ReadFlag("UNIPREFILL_CUDA_DECODES_AS_ROWS", &d.decodes_as_rows));
  UP_RETURN_IF_ERROR(ReadFlag("UNIPREFILL_CUDA_WEIGHT_FLOOR", &d.weight_floor));
  UP_RETURN_IF_ERROR(ReadFlag("UNIPREFILL_CUDA_SMALL_PIECES", &d.small_pieces));
  UP_RETURN_IF_ERROR(ReadFlag("UNIPREFILL_CUDA_PREFIX_ONE_LAUNCH", &d.prefix_one_launch));
  UP_RETURN_IF_ERROR(ReadFlag("UNIPREFILL_CUDA_ALIGN_STEP_ROWS", &d.align_step_rows));
  UP_RETURN_IF_ERROR(ReadFlag("UNIPREFILL_CUDA_GEMM_TUNE", &d.gemm_tune));
  UP_RETURN_IF_ERROR(ReadFlag("UNIPREFILL_CUDA_SEPARATE_UPLOADS", &d.separate_uploads));
  UP_RETURN_IF_ERROR(ReadFlag("UNIPREFILL_CUDA_SEPARATE_ROPE", &d.separate_rope));
  UP_RETURN_IF_ERROR(ReadFlag("UNIPREFILL_CUDA_KEPT_QUERIES_ON_FLASH", &d.kept_queries_on_flash));
  UP_RETURN_IF_ERROR(ReadFlag("UNIPREFILL_CUDA_RESIDUAL_IN_GEMM", &d.residual_in_gemm));
  UP_RETURN_IF_ERROR(ReadFlag("UNIPREFILL_CUDA_WGMMA_GROUP_ORDER", &d.wgmma_group_order));
  UP_RETURN_IF_ERROR(
      ReadFlag("UNIPREFILL_CUDA_WGMMA_SKIP_UNIT_RESCALE", &d.wgmma_skip_unit_rescale));
  if (const char* v = std::getenv("UNIPREFILL_CUDA_WGMMA_SCHEDULE"); v && *v) {
    using S = ops::cuda::WgmmaAttentionSchedule;
    const std::string name = v;
    if (name == "overlap") {
      d.wgmma_schedule = S::kIntraOverlap;
    } else if (name == "pv_beside_exp") {
      d.wgmma_schedule = S::kIntraOverlapPvBesideExp;
    } else if (name == "serial") {
      d.wgmma_schedule = S::kSerial;
    } else {
      return InvalidArgument("UNIPREFILL_CUDA_WGMMA_SCHEDULE must be overlap, pv_beside_exp or "
                             "serial (got '" + name + "')");
    }
  }
  if (const char* v = std::getenv("UNIPREFILL_CUDA_TILE_OVERSHOOT"); v && *v) {
    char* end = nullptr;
    const double x = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(x >= 0 && x <= 0.5)) {
      return InvalidArgument(std::string("UNIPREFILL_CUDA_TILE_OVERSHOOT must be a share of the "
                                         "step budget in [0, 0.5], e.g. 0.15 (got '") + v + "')");
    }
    d.tile_overshoot = x;
  }
  UP_RETURN_IF_ERROR(ReadFlag("UNIPREFILL_CUDA_GATED_GEMM", &d.gated_gemm));
  if (const char* v = std::getenv("UNIPREFILL_CUDA_GATED_GEMM_MIN_ROWS"); v && *v) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || n < 1 || n > (1L << 30)) {
      return InvalidArgument(std::string("UNIPREFILL_CUDA_GATED_GEMM_MIN_ROWS must be a row count "
                                         ">= 1, e.g. 256 (got '") +
                             v + "')");
    }
    d.gated_gemm_min_rows = static_cast<int>(n);
  }
  if (const char* v = std::getenv("UNIPREFILL_CUDA_GATED_GEMM_VARIANT"); v && *v) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || n < 0 || n > 15) {
      return InvalidArgument(std::string("UNIPREFILL_CUDA_GATED_GEMM_VARIANT must be a "
                                         "configuration number, e.g. 0 (got '") + v + "')");
    }
    d.gated_gemm_variant = static_cast<int>(n);
  }
  if (const char* v = std::getenv("UNIPREFILL_CUDA_GEMM_MAX_ROWS"); v && *v) {
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    if (end == v || *end != '\0' || n < 0 || n > (1LL << 31)) {
      return InvalidArgument(std::string("UNIPREFILL_CUDA_GEMM_MAX_ROWS must be a row count "
                                         "(0: whole GEMMs), e.g. 4096 (got '") + v + "')");
    }
    d.gemm_max_rows = n;
  }
  if (const char* v = std::getenv("UNIPREFILL_CUDNN_SDPA"); v && *v) {
    using Impl = ops::cuda::CudnnSdpaImplementation;
    const std::string s = v;
    bool known = false;
    for (Impl impl : {Impl::kAuto, Impl::kComposite, Impl::kUnified}) {
      if (s == ops::cuda::CudnnSdpaImplementationName(impl)) {
        d.cudnn_sdpa = impl;
        known = true;
      }
    }
    if (!known) {
      return InvalidArgument("UNIPREFILL_CUDNN_SDPA must be auto, composite or unified (got '" +
                             s + "')");
    }
  }
  return d;
}

}  // namespace uniprefill::cuda_backend
