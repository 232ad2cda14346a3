// For the loop's unit tests: an observer that records what the scheduler reported.
#pragma once

#include <string>
#include <vector>

#include "loop/schedule/progress.h"

namespace cohort::loop::testing {

// What a ProgressObserver was told, as lines such as "failed m1#1 retrying: why".
class RecordingObserver : public ProgressObserver {
 public:
  void AttemptStarted(const AttemptRef& a) override { Add("started", a, ""); }
  void Training(const AttemptRef& a, const TrainingProgress&) override {}
  void Predicting(const AttemptRef& a) override { Add("predicting", a, ""); }
  void AttemptDone(const AttemptRef& a, double) override { Add("done", a, ""); }
  void AttemptFailed(const AttemptRef& a, const std::string& why, AfterFailure after) override {
    const char* what = after == AfterFailure::kRetrying        ? "failed-retrying"
                       : after == AfterFailure::kNoRetriesLeft ? "failed-final"
                                                               : "failed-stopped";
    Add(what, a, why);
  }
  void Note(const std::string& line) override { notes.push_back(line); }

  bool Has(const std::string& prefix) const {
    for (const std::string& e : events) {
      if (e.rfind(prefix, 0) == 0) return true;
    }
    return false;
  }

  std::vector<std::string> events;
  std::vector<std::string> notes;

 private:
  void Add(const char* what, const AttemptRef& a, const std::string& why) {
    events.push_back(std::string(what) + " " + a.member_name + "#" + std::to_string(a.attempt) +
                     (why.empty() ? "" : ": " + why));
  }
};

}  // namespace cohort::loop::testing
