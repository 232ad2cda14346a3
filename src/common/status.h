// Status and Result<T>: the error type that crosses every module line in cohort.
//
// A Status is either OK or carries a code and a one-line message that names the file, table,
// field or line at fault. Result<T> holds a value or a non-OK Status. Neither throws; callers
// check ok() and propagate with COHORT_RETURN_IF_ERROR / COHORT_ASSIGN_OR_RETURN.
//
// Thread-safety: values; distinct objects may be used from different threads freely.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace cohort {

class Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,  // the caller's input is wrong (bad id, bad flag, schema mismatch)
    kNotFound,         // a named file, table, generation or sample does not exist
    kCorruption,       // data on disk is damaged (checksum, truncated file, bad header)
    kIOError,          // the operating system refused (open, write, fsync, rename)
    kBusy,             // someone else holds a resource (the store's writer lock)
    kAlreadyExists,    // creating something that is already there
    kAborted,          // the operation was stopped on purpose (injected crash, cancel)
  };

  Status() = default;
  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return {Code::kInvalidArgument, std::move(msg)};
  }
  static Status NotFound(std::string msg) { return {Code::kNotFound, std::move(msg)}; }
  static Status Corruption(std::string msg) { return {Code::kCorruption, std::move(msg)}; }
  static Status IOError(std::string msg) { return {Code::kIOError, std::move(msg)}; }
  static Status Busy(std::string msg) { return {Code::kBusy, std::move(msg)}; }
  static Status AlreadyExists(std::string msg) { return {Code::kAlreadyExists, std::move(msg)}; }
  static Status Aborted(std::string msg) { return {Code::kAborted, std::move(msg)}; }
  // An IOError carrying strerror(err) for the path and operation that failed.
  static Status FromErrno(const std::string& what, int err);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  bool IsBusy() const { return code_ == Code::kBusy; }
  bool IsInvalidArgument() const { return code_ == Code::kInvalidArgument; }

  // "corruption: store/gen-000003.json: checksum mismatch" style text for logs and the CLI.
  std::string ToString() const;
  // The same status with "context: " put in front of the message.
  Status WithContext(const std::string& context) const;

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.ok() && "Result constructed from an OK status without a value");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace cohort

#define COHORT_CONCAT_INNER_(a, b) a##b
#define COHORT_CONCAT_(a, b) COHORT_CONCAT_INNER_(a, b)

#define COHORT_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::cohort::Status cohort_status_ = (expr);        \
    if (!cohort_status_.ok()) return cohort_status_; \
  } while (0)

// NOLINTBEGIN(bugprone-macro-parentheses): `lhs` may be a declaration, it cannot be wrapped.
#define COHORT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

#define COHORT_ASSIGN_OR_RETURN(lhs, expr) \
  COHORT_ASSIGN_OR_RETURN_IMPL_(COHORT_CONCAT_(cohort_result_, __LINE__), lhs, expr)
// NOLINTEND(bugprone-macro-parentheses)
