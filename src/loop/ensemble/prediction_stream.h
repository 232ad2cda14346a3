// Member prediction files read a block of rows at a time, so that checking and scoring a pool
// of 10^7 rows holds one block per member (a few MiB) instead of every member's whole file
// (400 MB each at 10 classes). The pool's files are checked this way when an attempt ends and
// scored this way by every per-sample strategy (loop/acquire/stream_scores.h); BatchBALD and
// regression runs still stack the files whole (loop/ensemble/predictions.h).
//
// Thread-safety: a PredictionStream is used by one thread at a time; the functions are pure
// over their arguments and the files.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "loop/ensemble/predictions.h"

namespace cohort::loop {

// One float32 .npy of class probabilities, (rows, classes) or, for MC-dropout passes,
// (passes, rows, classes), read with pread.
class PredictionStream {
 public:
  // Checks the header: float32, the shape above with `rows` rows, and `classes` classes when
  // that is > 0 (else any count >= 2). `name` stands for the file in messages.
  static Result<std::unique_ptr<PredictionStream>> Open(const std::string& path,
                                                        const std::string& name, uint64_t rows,
                                                        int64_t classes, int64_t passes = 0);
  ~PredictionStream();
  PredictionStream(const PredictionStream&) = delete;
  PredictionStream& operator=(const PredictionStream&) = delete;

  int64_t classes() const { return classes_; }
  int64_t passes() const { return passes_; }  // 0 for a (rows, classes) file
  // Rows [first, first + count) of every pass (one pass for a 2-D file) into `out`, laid out
  // [pass][row][class]: max(1, passes) * count * classes floats.
  Status Read(uint64_t first, uint64_t count, float* out) const;

 private:
  PredictionStream() = default;
  int fd_ = -1;
  std::string name_;
  uint64_t rows_ = 0;
  int64_t classes_ = 0;
  int64_t passes_ = 0;
  uint64_t data_offset_ = 0;
};

// Rows per block: 8,192 rows of 8 members x 10 classes is 2.6 MB.
inline constexpr uint64_t kPredictionBlockRows = 8192;

// Checks a member's probability file block by block as ReadMemberPredictions checks it whole:
// header and shape, then every row (named by member, pass and sample id). Sets *classes to the
// file's class count. `passes` > 0 for an MC-dropout passes file.
Status CheckPredictionFile(const std::string& path, const std::string& name, uint64_t rows,
                           int64_t expected_classes, int64_t* classes,
                           std::span<const uint64_t> ids = {}, const std::string& member = "",
                           int64_t passes = 0);

// The same checks, reading the whole file into memory: [pass][row][class] values.
Result<std::vector<float>> ReadProbabilities(const std::string& path, const std::string& name,
                                             uint64_t rows, int64_t expected_classes,
                                             int64_t* classes, std::span<const uint64_t> ids,
                                             const std::string& member, int64_t passes);

}  // namespace cohort::loop
