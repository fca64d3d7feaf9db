#include "core/status.h"

namespace uniprefill {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kDataLoss: return "malformed data";
    case ErrorCode::kUnimplemented: return "unsupported";
    case ErrorCode::kOutOfRange: return "out of range";
    case ErrorCode::kResourceExhausted: return "resource exhausted";
    case ErrorCode::kInternal: return "internal error";
    case ErrorCode::kUnavailable: return "unavailable";
  }
  return "unknown";
}

}  // namespace uniprefill
