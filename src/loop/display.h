// Display: what `cohort run` shows while it goes.
//
// On a terminal: a round header, a run line (members done/running/queued, the round's elapsed
// time and ETA, and the run's when the stop rules bound it) and one line per member (device, state,
// epoch/step, loss, samples/s, ETA, retries; seconds spent predicting; test accuracy once known),
// each cut to the terminal's width (asked at every redraw, so a resized window is followed),
// redrawn in place at most every 200 ms, with notes (a member finished, failed, a round committed)
// scrolling above it; colours unless NO_COLOR is set (https://no-color.org) or TERM is "dumb".
// Anywhere else (a file, a pipe, CI): plain lines, one per note, plus every `plain_interval` one
// line per running member, never a control sequence.
//
// Thread-safety: used by the controller thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "loop/schedule/progress.h"

namespace cohort::loop {

// What the display knows about one member in the current round.
struct MemberLine {
  std::string name;
  std::string device;  // empty while queued
  enum class State {
    kQueued,
    kStarting,
    kTraining,
    kPredicting,
    kDone,
    kFailed
  } state = State::kQueued;
  int attempt = 0;
  int retries = 0;  // failed attempts this round
  int64_t epoch = 0, epochs = 0, step = 0, steps = 0;
  std::optional<double> loss;
  std::optional<double> samples_per_second;
  std::optional<double> eta_s;
  std::string note;                                 // "in 1m05s" when done, the reason when failed
  std::chrono::steady_clock::time_point started{};  // the attempt's start
  std::chrono::steady_clock::time_point since{};    // the current state's start (predicting)
  std::optional<double> seconds;                    // the attempt's time, when done
  std::optional<double> accuracy;                   // the member's test accuracy, when known
};

struct DisplayOptions {
  // -1: decide from isatty(out).
  int terminal = -1;
  // -1: decide from NO_COLOR and TERM.
  int color = -1;
  std::chrono::milliseconds plain_interval{30000};
  // Terminal columns lines are cut to; -1: ask the terminal (TIOCGWINSZ) at each redraw; 0:
  // no cut.
  int width = -1;
};

class Display {
 public:
  Display(FILE* out, DisplayOptions options);
  ~Display();
  Display(const Display&) = delete;
  Display& operator=(const Display&) = delete;

  bool terminal() const { return terminal_; }

  // A permanent line ("round 2 committed gen 5: 3000 labels, test accuracy 0.8123").
  void Note(const std::string& line);
  // A new round: header fields, and the members' lines reset to queued.
  void StartRound(int64_t round, uint64_t generation, int64_t labels,
                  std::optional<double> last_accuracy, const std::vector<std::string>& members);
  // What the run line's "run eta" adds to the round's: the rounds the stop rules allow after
  // this one, and a round's typical wall time; either unknown: no run ETA.
  void SetRunPlan(std::optional<int64_t> rounds_after, std::optional<double> round_seconds) {
    rounds_after_ = rounds_after;
    round_seconds_ = round_seconds;
  }
  MemberLine& member(size_t index) { return members_.at(index); }
  size_t member_count() const { return members_.size(); }
  // Redraws (terminal) or prints the periodic lines (plain) when it is time; `force` now.
  void Refresh(bool force = false);
  // Removes the live block (before the program's last lines).
  void Finish();

 private:
  void Erase();
  void Draw();
  int Width() const;
  std::string Render(const MemberLine& m) const;
  std::string RunLine() const;
  std::optional<double> RoundEta() const;
  std::string Paint(const char* code, const std::string& text) const;

  FILE* out_;
  bool terminal_ = false;
  bool color_ = false;
  DisplayOptions options_;
  std::string header_;
  std::vector<MemberLine> members_;
  std::optional<int64_t> rounds_after_;
  std::optional<double> round_seconds_;
  int drawn_lines_ = 0;
  std::chrono::steady_clock::time_point round_started_{};
  std::chrono::steady_clock::time_point last_draw_{};
  std::chrono::steady_clock::time_point last_plain_{};
};

// The Display as the scheduler's progress observer: member lines and notes.
class DisplayProgress : public ProgressObserver {
 public:
  explicit DisplayProgress(Display* display) : display_(display) {}
  // Asked when an attempt is done: the member's own test accuracy, shown on its line at once
  // (the round's metrics come when every member is done). Unset or nullopt: shown later.
  std::function<std::optional<double>(const AttemptRef&)> member_accuracy;
  void AttemptStarted(const AttemptRef& attempt) override;
  void Training(const AttemptRef& attempt, const TrainingProgress& progress) override;
  void Predicting(const AttemptRef& attempt) override;
  void AttemptDone(const AttemptRef& attempt, double seconds) override;
  void AttemptFailed(const AttemptRef& attempt, const std::string& why,
                     AfterFailure after) override;
  void Note(const std::string& line) override { display_->Note(line); }
  void Tick(bool force) override { display_->Refresh(force); }

 private:
  Display* display_;
};

// "1m05s", "2h03m", "42s".
std::string FormatDuration(double seconds);

// `line` cut to `width` visible columns (colour sequences kept and not counted, a colour left
// open is closed); `width` <= 0 leaves it whole.
std::string CutToWidth(const std::string& line, int width);

}  // namespace cohort::loop
