// Status and Result: how every fallible call in the engine reports failure.
//
// Goals: errors that reach a user say what was wrong (with the value) and what to do; no exceptions
// cross module boundaries and nothing aborts the process on bad input.
// Non-goals: error codes for programmatic branching beyond a coarse category.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace uniprefill {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,  // a bad flag, option or request value
  kNotFound,         // a missing file or key
  kDataLoss,         // a malformed or truncated file
  kUnimplemented,    // an unsupported architecture, quant type or feature
  kOutOfRange,       // e.g. a prompt longer than the context
  kResourceExhausted,
  kInternal,
  kUnavailable,  // the service is shutting down or cannot take work now
};

const char* ErrorCodeName(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "<message>" for errors, "ok" otherwise.
  std::string ToString() const { return ok() ? "ok" : message_; }

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgument(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }
inline Status DataLoss(std::string m) { return {ErrorCode::kDataLoss, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {ErrorCode::kUnimplemented, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {ErrorCode::kOutOfRange, std::move(m)}; }
inline Status ResourceExhausted(std::string m) {
  return {ErrorCode::kResourceExhausted, std::move(m)};
}
inline Status Internal(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }
inline Status Unavailable(std::string m) { return {ErrorCode::kUnavailable, std::move(m)}; }

// A value or an error. Accessing value() of an error is a programming bug (asserted).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(runtime/explicit)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(runtime/explicit)

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace uniprefill

// Propagates an error Status from an expression returning Status.
#define UP_RETURN_IF_ERROR(expr)            \
  do {                                      \
    ::uniprefill::Status _st = (expr);      \
    if (!_st.ok()) return _st;              \
  } while (0)

#define UP_CONCAT_INNER(a, b) a##b
#define UP_CONCAT(a, b) UP_CONCAT_INNER(a, b)
// `UP_ASSIGN_OR_RETURN(auto x, MakeX());` binds the value or returns the error.
#define UP_ASSIGN_OR_RETURN(lhs, expr) \
  UP_ASSIGN_OR_RETURN_IMPL(UP_CONCAT(_result_, __LINE__), lhs, expr)
#define UP_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
