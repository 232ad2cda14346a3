#include "loop/update/relabel_or_drop.h"

#include <fmt/format.h>

#include <algorithm>

namespace cohort::loop {

Result<std::vector<SuspectLabel>> SelectSuspectLabels(const EnsemblePredictions& p,
                                                      std::span<const int64_t> labels,
                                                      const SuspectRule& rule,
                                                      const std::vector<bool>* eligible) {
  COHORT_RETURN_IF_ERROR(ValidatePredictions(p));
  if (static_cast<int64_t>(labels.size()) != p.samples) {
    return Status::InvalidArgument(
        fmt::format("suspect labels: {} labels for {} samples", labels.size(), p.samples));
  }
  if (eligible != nullptr && static_cast<int64_t>(eligible->size()) != p.samples) {
    return Status::InvalidArgument(fmt::format(
        "suspect labels: {} eligibility flags for {} samples", eligible->size(), p.samples));
  }
  std::vector<SuspectLabel> suspects;
  std::vector<double> mean(static_cast<size_t>(p.classes));
  for (int64_t i = 0; i < p.samples; i++) {
    if (eligible != nullptr && !(*eligible)[static_cast<size_t>(i)]) continue;
    const int64_t label = labels[static_cast<size_t>(i)];
    if (label < 0 || label >= p.classes) {
      return Status::InvalidArgument(fmt::format(
          "suspect labels: sample {} has label {}, outside [0, {})", i, label, p.classes));
    }
    // Summed in member order in double, as the acquisition scores are: reproducible.
    std::fill(mean.begin(), mean.end(), 0.0);
    for (int64_t m = 0; m < p.members; m++) {
      const float* row = p.row(m, i);
      for (int64_t c = 0; c < p.classes; c++) mean[c] += row[c];
    }
    const double probability = mean[label] / static_cast<double>(p.members);
    if (probability >= rule.threshold) continue;
    const int64_t predicted = std::max_element(mean.begin(), mean.end()) - mean.begin();
    suspects.push_back({i, label, probability, predicted});
  }
  std::stable_sort(
      suspects.begin(), suspects.end(),
      [](const SuspectLabel& a, const SuspectLabel& b) { return a.probability < b.probability; });
  if (rule.max_per_round > 0 && static_cast<int64_t>(suspects.size()) > rule.max_per_round) {
    suspects.resize(static_cast<size_t>(rule.max_per_round));
  }
  return suspects;
}

}  // namespace cohort::loop
