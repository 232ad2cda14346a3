// Acquisition cost: every strategy's time to score and pick a batch from a synthetic ensemble
// (softmax of seeded pseudo-random logits), then BatchBALD's time over its candidates and
// label configurations. Prints tables (docs/acquisition.md quotes them); asserts nothing.
// sum_gains_nats is the sum of the picks' estimated gains: the batch's joint mutual information
// while configurations are enumerated exactly, above it once they are sampled (each pick is
// the largest of many noisy estimates). The true value never exceeds ln M (ln 8 = 2.08).
//
//   acquisition_bench [--quick]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/splitmix.h"
#include "loop/acquire/acquisition.h"
#include "loop/acquire/batch_bald.h"

namespace {

using cohort::loop::EnsemblePredictions;

std::vector<float> SyntheticEnsemble(int64_t members, int64_t samples, int64_t classes) {
  std::vector<float> data(static_cast<size_t>(members * samples * classes));
  uint64_t state = 20261204;
  for (int64_t r = 0; r < members * samples; r++) {
    float* row = &data[static_cast<size_t>(r * classes)];
    double sum = 0;
    for (int64_t c = 0; c < classes; c++) {
      row[c] = static_cast<float>(std::exp(4.0 * cohort::SplitMix64Unit(&state)));
      sum += row[c];
    }
    for (int64_t c = 0; c < classes; c++) row[c] = static_cast<float>(row[c] / sum);
  }
  return data;
}

double Milliseconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

int Fail(const cohort::Status& s) {
  std::fprintf(stderr, "acquisition_bench: error: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int64_t members = 8;
  const int64_t samples = quick ? 5000 : 60000;
  const int64_t classes = 10;
  std::vector<float> data = SyntheticEnsemble(members, samples, classes);
  auto view = cohort::loop::MakeEnsemblePredictions(data, members, samples, classes);
  if (!view.ok()) return Fail(view.status());

  std::printf("Per-sample strategies, M=%lld N=%lld C=%lld, top k=1000 (one thread)\n",
              static_cast<long long>(members), static_cast<long long>(samples),
              static_cast<long long>(classes));
  std::printf("%-16s %10s\n", "strategy", "ms");
  for (const std::string& s :
       cohort::loop::StrategyNames(cohort::loop::StrategyTask::kClassification)) {
    if (s == "batchbald") continue;
    auto start = std::chrono::steady_clock::now();
    auto picks = cohort::loop::Acquire(s, *view, 1000, 1);
    if (!picks.ok()) return Fail(picks.status());
    std::printf("%-16s %10.1f\n", s.c_str(), Milliseconds(start));
  }

  struct Setting {
    int64_t k, candidates, configurations;
  };
  std::vector<Setting> settings =
      quick ? std::vector<Setting>{{10, 200, 100}}
            : std::vector<Setting>{{10, 1000, 200},   {100, 1000, 200}, {250, 1000, 200},
                                   {250, 1000, 1000}, {250, 2000, 200}, {1000, 2000, 200}};
  std::printf("\nBatchBALD, same ensemble\n");
  std::printf("%6s %11s %15s %10s %12s %15s\n", "k", "candidates", "configurations", "ms",
              "ms_per_pick", "sum_gains_nats");
  for (const Setting& s : settings) {
    auto start = std::chrono::steady_clock::now();
    auto picks = cohort::loop::SelectBatchBald(*view, s.k, 1, {}, {s.configurations, s.candidates});
    if (!picks.ok()) return Fail(picks.status());
    const double ms = Milliseconds(start);
    double joint = 0;
    for (double g : picks->gains) joint += g;
    std::printf("%6lld %11lld %15lld %10.0f %12.2f %15.3f\n", static_cast<long long>(s.k),
                static_cast<long long>(s.candidates), static_cast<long long>(s.configurations), ms,
                ms / static_cast<double>(s.k), joint);
  }
  return 0;
}
