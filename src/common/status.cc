#include "common/status.h"

#include <cstring>

namespace cohort {

Status Status::FromErrno(const std::string& what, int err) {
  Code code = (err == ENOENT) ? Code::kNotFound : Code::kIOError;
  return Status(code, what + ": " + std::strerror(err));
}

std::string Status::ToString() const {
  const char* name = "ok";
  switch (code_) {
    case Code::kOk:
      return "ok";
    case Code::kInvalidArgument:
      name = "invalid argument";
      break;
    case Code::kNotFound:
      name = "not found";
      break;
    case Code::kCorruption:
      name = "corruption";
      break;
    case Code::kIOError:
      name = "I/O error";
      break;
    case Code::kBusy:
      name = "busy";
      break;
    case Code::kAlreadyExists:
      name = "already exists";
      break;
    case Code::kAborted:
      name = "aborted";
      break;
  }
  return std::string(name) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

}  // namespace cohort
