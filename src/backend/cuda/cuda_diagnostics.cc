// DiagnosticsFromEnvironment (cuda_diagnostics.h).
#include "backend/cuda/cuda_diagnostics.h"

#include <cstdlib>
#include <string>

namespace uniprefill::cuda_backend {

Result<CudaDiagnostics> DiagnosticsFromEnvironment() {
  CudaDiagnostics d;
  UP_ASSIGN_OR_RETURN(d.trace, StepTrace::FromEnvironment());
  if (const char* v = std::getenv("UNIPREFILL_CUDA_SYNC_EVERY_FORWARD"); v && *v) {
    const std::string s = v;
    if (s != "0" && s != "1") {
      return InvalidArgument("UNIPREFILL_CUDA_SYNC_EVERY_FORWARD must be 0 or 1 (got '" + s + "')");
    }
    d.sync_every_forward = s == "1";
  }
  if (const char* v = std::getenv("UNIPREFILL_CUDA_ATTENTION_SLOWDOWN"); v && *v) {
    char* end = nullptr;
    const double x = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(x > 0 && x <= 16)) {
      return InvalidArgument(std::string("UNIPREFILL_CUDA_ATTENTION_SLOWDOWN must be a number in "
                                         "(0, 16] (got '") + v + "')");
    }
    d.attention_slowdown = x;
  }
  if (const char* v = std::getenv("UNIPREFILL_CUDA_PREFIX_COPY"); v && *v) {
    const std::string s = v;
    if (s != "0" && s != "1") {
      return InvalidArgument("UNIPREFILL_CUDA_PREFIX_COPY must be 0 or 1 (got '" + s + "')");
    }
    d.prefix_copy = s == "1";
  }
  if (const char* v = std::getenv("UNIPREFILL_CUDA_SPLIT_ON_CUDNN"); v && *v) {
    const std::string s = v;
    if (s != "0" && s != "1") {
      return InvalidArgument("UNIPREFILL_CUDA_SPLIT_ON_CUDNN must be 0 or 1 (got '" + s + "')");
    }
    d.split_on_cudnn = s == "1";
  }
  if (const char* v = std::getenv("UNIPREFILL_CUDA_UNTILED_PRICE"); v && *v) {
    const std::string s = v;
    if (s != "0" && s != "1") {
      return InvalidArgument("UNIPREFILL_CUDA_UNTILED_PRICE must be 0 or 1 (got '" + s + "')");
    }
    d.untiled_price = s == "1";
  }
  if (const char* v = std::getenv("UNIPREFILL_CUDA_DECODES_AS_ROWS"); v && *v) {
    const std::string s = v;
    if (s != "0" && s != "1") {
      return InvalidArgument("UNIPREFILL_CUDA_DECODES_AS_ROWS must be 0 or 1 (got '" + s + "')");
    }
    d.decodes_as_rows = s == "1";
  }
  if (const char* v = std::getenv("UNIPREFILL_CUDA_WEIGHT_FLOOR"); v && *v) {
    const std::string s = v;
    if (s != "0" && s != "1") {
      return InvalidArgument("UNIPREFILL_CUDA_WEIGHT_FLOOR must be 0 or 1 (got '" + s + "')");
    }
    d.weight_floor = s == "1";
  }
  if (const char* v = std::getenv("UNIPREFILL_CUDA_SMALL_PIECES"); v && *v) {
    const std::string s = v;
    if (s != "0" && s != "1") {
      return InvalidArgument("UNIPREFILL_CUDA_SMALL_PIECES must be 0 or 1 (got '" + s + "')");
    }
    d.small_pieces = s == "1";
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
