#include "loop/display.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace cohort::loop {

namespace {

using Clock = std::chrono::steady_clock;

const char* StateName(MemberLine::State s) {
  switch (s) {
    case MemberLine::State::kQueued:
      return "queued";
    case MemberLine::State::kStarting:
      return "starting";
    case MemberLine::State::kTraining:
      return "training";
    case MemberLine::State::kPredicting:
      return "predicting";
    case MemberLine::State::kDone:
      return "done";
    case MemberLine::State::kFailed:
      return "failed";
  }
  return "?";
}

bool ColorWanted() {
  const char* no_color = std::getenv("NO_COLOR");
  if (no_color != nullptr && no_color[0] != '\0') return false;
  const char* term = std::getenv("TERM");
  return term == nullptr || std::strcmp(term, "dumb") != 0;
}

}  // namespace

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<int64_t>(std::llround(seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}

Display::Display(FILE* out, DisplayOptions options) : out_(out), options_(options) {
  terminal_ = options.terminal >= 0 ? options.terminal != 0 : ::isatty(::fileno(out)) == 1;
  const char* term = std::getenv("TERM");
  if (options.terminal < 0 && term != nullptr && std::strcmp(term, "dumb") == 0) terminal_ = false;
  color_ = terminal_ && (options.color >= 0 ? options.color != 0 : ColorWanted());
  last_plain_ = Clock::now();
}

Display::~Display() { Finish(); }

std::string Display::Paint(const char* code, const std::string& text) const {
  if (!color_) return text;
  return fmt::format("\x1b[{}m{}\x1b[0m", code, text);
}

std::string Display::Render(const MemberLine& m) const {
  std::string line = fmt::format("  {:<18} {:<7} ", m.name, m.device.empty() ? "-" : m.device);
  std::string state = StateName(m.state);
  const char* color = m.state == MemberLine::State::kDone     ? "32"
                      : m.state == MemberLine::State::kFailed ? "31"
                      : m.state == MemberLine::State::kQueued ? "2"
                                                              : "36";
  line += Paint(color, fmt::format("{:<10}", state));
  if (m.state == MemberLine::State::kTraining && m.epochs > 0) {
    line += fmt::format(" epoch {}/{} step {}/{}", m.epoch, m.epochs, m.step, m.steps);
    if (m.loss) line += fmt::format(" loss {:.4f}", *m.loss);
    if (m.samples_per_second) line += fmt::format(" {:.0f} samples/s", *m.samples_per_second);
    if (m.eta_s) line += " eta " + FormatDuration(*m.eta_s);
  }
  if (!m.note.empty()) line += " " + m.note;
  if (m.retries > 0) line += Paint("33", fmt::format(" (retries {})", m.retries));
  return line;
}

void Display::Erase() {
  if (!terminal_ || drawn_lines_ == 0) return;
  std::string s;
  for (int i = 0; i < drawn_lines_; ++i) s += "\x1b[1A\x1b[2K";
  std::fputs(s.c_str(), out_);
  drawn_lines_ = 0;
}

void Display::Draw() {
  if (header_.empty()) return;
  std::string block = Paint("1", header_) + "\n";
  for (const MemberLine& m : members_) block += Render(m) + "\n";
  std::fputs(block.c_str(), out_);
  drawn_lines_ = 1 + static_cast<int>(members_.size());
  std::fflush(out_);
  last_draw_ = Clock::now();
}

void Display::Note(const std::string& line) {
  Erase();
  std::fprintf(out_, "%s\n", line.c_str());
  if (terminal_) Draw();
  std::fflush(out_);
}

void Display::StartRound(int64_t round, uint64_t generation, int64_t labels,
                         std::optional<double> last_accuracy,
                         const std::vector<std::string>& members) {
  Erase();
  header_ = fmt::format("round {}  generation {}  labels {}", round, generation, labels);
  if (last_accuracy) header_ += fmt::format("  last test accuracy {:.4f}", *last_accuracy);
  members_.clear();
  for (const std::string& name : members) {
    MemberLine line;
    line.name = name;
    members_.push_back(line);
  }
  if (terminal_) {
    Draw();
  } else {
    std::fprintf(out_, "%s\n", header_.c_str());
    std::fflush(out_);
  }
  last_plain_ = Clock::now();
}

void Display::Refresh(bool force) {
  auto now = Clock::now();
  if (terminal_) {
    if (!force && now - last_draw_ < std::chrono::milliseconds(200)) return;
    Erase();
    Draw();
    return;
  }
  if (!force && now - last_plain_ < options_.plain_interval) return;
  last_plain_ = now;
  for (const MemberLine& m : members_) {
    if (m.state == MemberLine::State::kTraining || m.state == MemberLine::State::kPredicting ||
        m.state == MemberLine::State::kStarting) {
      std::fprintf(out_, "%s\n", Render(m).c_str());
    }
  }
  std::fflush(out_);
}

void Display::Finish() {
  Erase();
  header_.clear();
  std::fflush(out_);
}

void DisplayProgress::AttemptStarted(const AttemptRef& a) {
  MemberLine& line = display_->member(a.member);
  MemberLine fresh;
  fresh.name = line.name;
  fresh.retries = line.retries;
  line = std::move(fresh);
  line.device = a.slot;
  line.attempt = a.attempt;
  line.state = MemberLine::State::kStarting;
}

void DisplayProgress::Training(const AttemptRef& a, const TrainingProgress& p) {
  MemberLine& line = display_->member(a.member);
  line.state = MemberLine::State::kTraining;
  line.epoch = p.epoch;
  line.epochs = p.epochs;
  line.step = p.step;
  line.steps = p.steps;
  line.loss = p.loss;
  line.samples_per_second = p.samples_per_second;
  if (p.eta_s) line.eta_s = p.eta_s;
}

void DisplayProgress::Predicting(const AttemptRef& a) {
  MemberLine& line = display_->member(a.member);
  line.state = MemberLine::State::kPredicting;
  line.eta_s.reset();
}

void DisplayProgress::AttemptDone(const AttemptRef& a, double seconds) {
  MemberLine& line = display_->member(a.member);
  line.state = MemberLine::State::kDone;
  line.note = "in " + FormatDuration(seconds);
}

void DisplayProgress::AttemptFailed(const AttemptRef& a, const std::string& why,
                                    AfterFailure after) {
  MemberLine& line = display_->member(a.member);
  line.retries += 1;
  switch (after) {
    case AfterFailure::kStopped:
      line.state = MemberLine::State::kFailed;
      line.note = why;
      break;
    case AfterFailure::kRetrying:
      line.state = MemberLine::State::kQueued;
      display_->Note(fmt::format("round {}: {} attempt {} on {} failed: {}; retrying", a.round,
                                 a.member_name, a.attempt, a.slot, why));
      break;
    case AfterFailure::kNoRetriesLeft:
      line.state = MemberLine::State::kFailed;
      line.note = why;
      display_->Note(fmt::format("round {}: {} attempt {} on {} failed: {}; no retries left",
                                 a.round, a.member_name, a.attempt, a.slot, why));
      break;
  }
}

}  // namespace cohort::loop
