#include "loop/ensemble/prediction_stream.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "loop/ensemble/view.h"
#include "store/npy.h"
#include "store/schema.h"

namespace cohort::loop {

namespace {

Status PreadAll(int fd, void* out, size_t bytes, uint64_t offset, const std::string& name) {
  auto* p = static_cast<char*>(out);
  while (bytes > 0) {
    ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Status::IOError(name + ": " + (n < 0 ? std::strerror(errno) : "file ended early"));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return Status::OK();
}

// How ValidatePredictions names the rows of a member's file: "m", or "m pass 3" per pass.
std::vector<std::string> RowNames(const std::string& member, int64_t passes) {
  std::vector<std::string> names;
  if (passes == 0) {
    if (!member.empty()) names.push_back(member);
    return names;
  }
  for (int64_t t = 0; t < passes; t++) {
    names.push_back((member.empty() ? std::string() : member + " ") + "pass " + std::to_string(t));
  }
  return names;
}

}  // namespace

Result<std::unique_ptr<PredictionStream>> PredictionStream::Open(const std::string& path,
                                                                 const std::string& name,
                                                                 uint64_t rows, int64_t classes,
                                                                 int64_t passes) {
  std::unique_ptr<PredictionStream> s(new PredictionStream());
  s->name_ = name;
  s->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (s->fd_ < 0) return Status::IOError(name + ": " + std::strerror(errno));
  const off_t size = ::lseek(s->fd_, 0, SEEK_END);
  if (size < 0) return Status::IOError(name + ": " + std::strerror(errno));
  // Headers are short (numpy's and cohort's: 128 bytes); 64 KiB covers any sane one.
  std::vector<std::byte> head(static_cast<size_t>(std::min<off_t>(size, 65536)));
  COHORT_RETURN_IF_ERROR(PreadAll(s->fd_, head.data(), head.size(), 0, name));
  COHORT_ASSIGN_OR_RETURN(store::NpyHeader h,
                          store::ParseNpyHeaderOf(head, static_cast<uint64_t>(size), name));
  // The same words for a 2-D file whether it is read whole or by blocks.
  std::vector<uint64_t> lead;  // the dimensions before the classes
  if (passes > 0) lead.push_back(static_cast<uint64_t>(passes));
  lead.push_back(rows);
  const bool leading_ok = h.dtype == store::Dtype::kFloat32 && h.shape.size() == lead.size() + 1 &&
                          std::equal(lead.begin(), lead.end(), h.shape.begin());
  if (passes > 0) {
    std::vector<uint64_t> want = lead;
    want.push_back(static_cast<uint64_t>(classes));
    if (!leading_ok || (classes > 0 && h.shape.back() != static_cast<uint64_t>(classes))) {
      return Status::InvalidArgument(fmt::format(
          "{}: expected float32 probabilities of shape {} (passes, rows, classes), got {} {}", name,
          store::DimsToString(want), store::DtypeName(h.dtype), store::DimsToString(h.shape)));
    }
  } else {
    if (!leading_ok || h.shape.back() < 2) {
      return Status::InvalidArgument(
          fmt::format("{}: expected float32 probabilities of shape ({}, classes), got {} {}", name,
                      rows, store::DtypeName(h.dtype), store::DimsToString(h.shape)));
    }
    if (classes > 0 && h.shape.back() != static_cast<uint64_t>(classes)) {
      return Status::InvalidArgument(
          fmt::format("{}: {} classes where the run has {}", name, h.shape.back(), classes));
    }
  }
  s->rows_ = rows;
  s->classes_ = static_cast<int64_t>(h.shape.back());
  s->passes_ = passes;
  s->data_offset_ = h.data_offset;
  return s;
}

PredictionStream::~PredictionStream() {
  if (fd_ >= 0) ::close(fd_);
}

Status PredictionStream::Read(uint64_t first, uint64_t count, float* out) const {
  const uint64_t row_bytes = static_cast<uint64_t>(classes_) * sizeof(float);
  const int64_t passes = std::max<int64_t>(1, passes_);
  for (int64_t t = 0; t < passes; t++) {
    const uint64_t offset = data_offset_ + (static_cast<uint64_t>(t) * rows_ + first) * row_bytes;
    COHORT_RETURN_IF_ERROR(PreadAll(fd_, out + static_cast<size_t>(t) * count * classes_,
                                    count * row_bytes, offset, name_));
  }
  return Status::OK();
}

Status CheckPredictionFile(const std::string& path, const std::string& name, uint64_t rows,
                           int64_t expected_classes, int64_t* classes,
                           std::span<const uint64_t> ids, const std::string& member,
                           int64_t passes) {
  COHORT_ASSIGN_OR_RETURN(auto stream,
                          PredictionStream::Open(path, name, rows, expected_classes, passes));
  const int64_t width = stream->classes();
  const int64_t count = std::max<int64_t>(1, passes);
  const std::vector<std::string> names = RowNames(member, passes);
  if (ids.size() != rows) ids = {};
  std::vector<float> block;
  for (uint64_t first = 0; first < rows; first += kPredictionBlockRows) {
    const uint64_t n = std::min(kPredictionBlockRows, rows - first);
    block.resize(static_cast<size_t>(count) * n * static_cast<size_t>(width));
    COHORT_RETURN_IF_ERROR(stream->Read(first, n, block.data()));
    EnsemblePredictions view{count, static_cast<int64_t>(n), width, block.data()};
    Status valid = ValidatePredictions(view, names, ids, static_cast<int64_t>(first));
    if (!valid.ok()) return Status::InvalidArgument(name + ": " + valid.message());
  }
  *classes = width;
  return Status::OK();
}

Result<std::vector<float>> ReadProbabilities(const std::string& path, const std::string& name,
                                             uint64_t rows, int64_t expected_classes,
                                             int64_t* classes, std::span<const uint64_t> ids,
                                             const std::string& member, int64_t passes) {
  COHORT_ASSIGN_OR_RETURN(auto stream,
                          PredictionStream::Open(path, name, rows, expected_classes, passes));
  const int64_t width = stream->classes();
  const int64_t count = std::max<int64_t>(1, passes);
  std::vector<float> values(static_cast<size_t>(count) * rows * static_cast<size_t>(width));
  COHORT_RETURN_IF_ERROR(stream->Read(0, rows, values.data()));
  EnsemblePredictions view{count, static_cast<int64_t>(rows), width, values.data()};
  if (ids.size() != rows) ids = {};
  Status valid = ValidatePredictions(view, RowNames(member, passes), ids);
  if (!valid.ok()) return Status::InvalidArgument(name + ": " + valid.message());
  *classes = width;
  return values;
}

}  // namespace cohort::loop
