// ProgressObserver: what the Scheduler reports while a round's members run, as ninja's Builder
// reports through its Status. The Display implements it for `cohort run` (DisplayProgress in
// display.h); tests record it. The scheduler never writes a display line itself.
//
// Thread-safety: called from the controller thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace cohort::loop {

// Which attempt an observation is about.
struct AttemptRef {
  int64_t round = 0;
  size_t member = 0;        // index into the config's members
  std::string member_name;  // the config's name for it
  std::string slot;         // "cpu:0", or "cpu:0/1" when a device has several slots
  int attempt = 0;
};

// A training progress event, as the member reported it.
struct TrainingProgress {
  int64_t epoch = 0, epochs = 0, step = 0, steps = 0;
  std::optional<double> loss;
  std::optional<double> samples_per_second;
  std::optional<double> eta_s;  // estimated by the scheduler from the steps done so far
};

// How a failed attempt leaves its member.
enum class AfterFailure {
  kRetrying,       // queued again
  kNoRetriesLeft,  // out of attempts this round
  kStopped,        // the scheduler is stopping everything (interrupt, controller error)
};

class ProgressObserver {
 public:
  virtual ~ProgressObserver() = default;
  // The attempt got its slot and is starting (a worker may still be starting under it).
  virtual void AttemptStarted(const AttemptRef& attempt) = 0;
  virtual void Training(const AttemptRef& attempt, const TrainingProgress& progress) = 0;
  virtual void Predicting(const AttemptRef& attempt) = 0;
  virtual void AttemptDone(const AttemptRef& attempt, double seconds) = 0;
  virtual void AttemptFailed(const AttemptRef& attempt, const std::string& why,
                             AfterFailure after) = 0;
  // A line worth keeping (an interrupt, a worker refused for its protocol version).
  virtual void Note(const std::string& line) = 0;
  // Called after every poll of the processes; `force` at the end of a phase.
  virtual void Tick(bool force) {}
};

}  // namespace cohort::loop
