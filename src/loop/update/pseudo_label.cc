#include "loop/update/pseudo_label.h"

#include <algorithm>
#include <map>

namespace cohort::loop {

Result<std::vector<PseudoLabel>> SelectPseudoLabels(const EnsemblePredictions& p,
                                                    const PseudoLabelRule& rule,
                                                    const std::vector<bool>* eligible) {
  COHORT_RETURN_IF_ERROR(ValidatePredictions(p));
  if (eligible != nullptr && static_cast<int64_t>(eligible->size()) != p.samples) {
    return Status::InvalidArgument("pseudo-labels: " + std::to_string(eligible->size()) +
                                   " eligibility flags for " + std::to_string(p.samples) +
                                   " samples");
  }
  std::vector<PseudoLabel> qualifying;
  std::vector<double> mean(static_cast<size_t>(p.classes));
  for (int64_t i = 0; i < p.samples; i++) {
    if (eligible != nullptr && !(*eligible)[static_cast<size_t>(i)]) continue;
    // Summed in member order in double, as the acquisition scores are: reproducible.
    std::fill(mean.begin(), mean.end(), 0.0);
    for (int64_t m = 0; m < p.members; m++) {
      const float* row = p.row(m, i);
      for (int64_t c = 0; c < p.classes; c++) mean[c] += row[c];
    }
    const auto best = std::max_element(mean.begin(), mean.end()) - mean.begin();
    const double confidence = mean[best] / static_cast<double>(p.members);
    if (confidence < rule.threshold) continue;
    bool agreed = true;
    for (int64_t m = 0; rule.agreement && agreed && m < p.members; m++) {
      const float* row = p.row(m, i);
      agreed = std::max_element(row, row + p.classes) - row == best;
    }
    if (agreed) qualifying.push_back({i, best, confidence});
  }
  std::stable_sort(
      qualifying.begin(), qualifying.end(),
      [](const PseudoLabel& a, const PseudoLabel& b) { return a.confidence > b.confidence; });
  std::vector<PseudoLabel> picks;
  std::map<int64_t, int64_t> per_class;
  for (const PseudoLabel& q : qualifying) {
    if (rule.max_per_round > 0 && static_cast<int64_t>(picks.size()) >= rule.max_per_round) break;
    if (rule.max_per_class > 0 && per_class[q.label] >= rule.max_per_class) continue;
    per_class[q.label]++;
    picks.push_back(q);
  }
  return picks;
}

}  // namespace cohort::loop
