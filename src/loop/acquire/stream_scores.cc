#include "loop/acquire/stream_scores.h"

#include <algorithm>
#include <memory>

#include "loop/ensemble/prediction_stream.h"

namespace cohort::loop {

Result<std::vector<double>> StreamScores(SampleMeasure measure,
                                         const std::vector<PoolSampleFile>& files, uint64_t rows,
                                         int64_t classes) {
  std::vector<std::unique_ptr<PredictionStream>> streams;
  int64_t members = 0;
  for (const PoolSampleFile& f : files) {
    COHORT_ASSIGN_OR_RETURN(auto s,
                            PredictionStream::Open(f.path, f.path, rows, classes, f.passes));
    members += std::max<int64_t>(1, f.passes);
    streams.push_back(std::move(s));
  }
  std::vector<double> scores;
  scores.reserve(rows);
  std::vector<float> block;
  for (uint64_t first = 0; first < rows; first += kPredictionBlockRows) {
    const uint64_t n = std::min(kPredictionBlockRows, rows - first);
    const size_t per_member = n * static_cast<size_t>(classes);
    block.resize(static_cast<size_t>(members) * per_member);
    float* at = block.data();
    for (const auto& s : streams) {
      COHORT_RETURN_IF_ERROR(s->Read(first, n, at));
      at += static_cast<size_t>(std::max<int64_t>(1, s->passes())) * per_member;
    }
    EnsemblePredictions view{members, static_cast<int64_t>(n), classes, block.data()};
    Status valid = ValidatePredictions(view, {}, {}, static_cast<int64_t>(first));
    if (!valid.ok()) return valid;
    COHORT_ASSIGN_OR_RETURN(std::vector<double> part, MeasureSamples(measure, view));
    scores.insert(scores.end(), part.begin(), part.end());
  }
  return scores;
}

}  // namespace cohort::loop
