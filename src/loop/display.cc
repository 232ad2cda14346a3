#include "loop/display.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
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

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool Running(MemberLine::State s) {
  return s == MemberLine::State::kStarting || s == MemberLine::State::kTraining ||
         s == MemberLine::State::kPredicting;
}

}  // namespace

std::string CutToWidth(const std::string& line, int width) {
  if (width <= 0) return line;
  std::string out;
  int columns = 0;
  bool painted = false;
  for (size_t i = 0; i < line.size();) {
    if (line[i] == '\x1b') {  // a colour sequence: ESC [ ... m, kept whole
      size_t end = line.find('m', i);
      end = end == std::string::npos ? line.size() : end + 1;
      out.append(line, i, end - i);
      painted = true;
      i = end;
      continue;
    }
    // A UTF-8 continuation byte belongs to the character before it.
    bool continuation = (static_cast<unsigned char>(line[i]) & 0xC0) == 0x80;
    if (!continuation && columns == width) break;
    if (!continuation) columns++;
    out += line[i++];
  }
  if (painted && out.size() < line.size()) out += "\x1b[0m";
  return out;
}

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
    line += fmt::format(" epoch {}/{}", m.epoch, m.epochs);
    // Outside members may report epochs only.
    if (m.steps > 0) line += fmt::format(" step {}/{}", m.step, m.steps);
    if (m.loss) line += fmt::format(" loss {:.4f}", *m.loss);
    if (m.samples_per_second) line += fmt::format(" {:.0f} samples/s", *m.samples_per_second);
    if (m.eta_s) line += " eta " + FormatDuration(*m.eta_s);
  }
  if (m.state == MemberLine::State::kPredicting && m.since != Clock::time_point{}) {
    line += " " + FormatDuration(SecondsSince(m.since));
  }
  if (m.state == MemberLine::State::kDone && m.accuracy) {
    line += fmt::format(" test accuracy {:.4f}", *m.accuracy);
  }
  if (!m.note.empty()) line += " " + m.note;
  if (m.retries > 0) line += Paint("33", fmt::format(" (retries {})", m.retries));
  return line;
}

// The time left in the round: the slowest running member's ETA, plus a member's typical time
// for each further wave the queued members need. None when nothing is known yet.
std::optional<double> Display::RoundEta() const {
  int running = 0, queued = 0, done = 0, estimated = 0;
  double slowest = 0, done_seconds = 0, expected_seconds = 0;
  for (const MemberLine& m : members_) {
    if (m.state == MemberLine::State::kQueued) queued++;
    if (m.state == MemberLine::State::kDone && m.seconds) {
      done++;
      done_seconds += *m.seconds;
    }
    if (!Running(m.state)) continue;
    running++;
    if (m.eta_s && m.started != Clock::time_point{}) {
      slowest = std::max(slowest, *m.eta_s);
      expected_seconds += SecondsSince(m.started) + *m.eta_s;
      estimated++;
    }
  }
  if (running == 0 || (estimated == 0 && (queued == 0 || done == 0))) return std::nullopt;
  if (queued == 0) return slowest;
  double typical = done > 0 ? done_seconds / done : expected_seconds / estimated;
  return slowest + std::ceil(static_cast<double>(queued) / running) * typical;
}

// "members 2 done, 1 running, 3 queued  elapsed 1m05s  round eta 2m10s  run eta 14m".
std::string Display::RunLine() const {
  int done = 0, running = 0, queued = 0, failed = 0;
  for (const MemberLine& m : members_) {
    done += m.state == MemberLine::State::kDone;
    running += Running(m.state);
    queued += m.state == MemberLine::State::kQueued;
    failed += m.state == MemberLine::State::kFailed;
  }
  std::string line = fmt::format("members {} done, {} running, {} queued", done, running, queued);
  if (failed > 0) line += fmt::format(", {} failed", failed);
  line += "  elapsed " + FormatDuration(SecondsSince(round_started_));
  if (auto eta = RoundEta()) {
    line += "  round eta " + FormatDuration(*eta);
    if (rounds_after_ && *rounds_after_ > 0 && round_seconds_) {
      line += "  run eta " +
              FormatDuration(*eta + static_cast<double>(*rounds_after_) * *round_seconds_);
    }
  }
  return line;
}

int Display::Width() const {
  if (options_.width >= 0) return options_.width;
  struct winsize ws {};
  if (::ioctl(::fileno(out_), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 0;
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
  // Every line fits the terminal: a wrapped line would throw the erase's line count off and
  // leave stale lines behind.
  const int width = Width();
  std::string block = CutToWidth(Paint("1", header_), width) + "\n";
  block += CutToWidth("  " + RunLine(), width) + "\n";
  for (const MemberLine& m : members_) block += CutToWidth(Render(m), width) + "\n";
  std::fputs(block.c_str(), out_);
  drawn_lines_ = 2 + static_cast<int>(members_.size());
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
  round_started_ = Clock::now();
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
  if (!header_.empty()) std::fprintf(out_, "  %s\n", RunLine().c_str());
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
  line.started = line.since = std::chrono::steady_clock::now();
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
  if (line.state != MemberLine::State::kPredicting) {
    line.since = std::chrono::steady_clock::now();
  }
  line.state = MemberLine::State::kPredicting;
  line.eta_s.reset();
}

void DisplayProgress::AttemptDone(const AttemptRef& a, double seconds) {
  MemberLine& line = display_->member(a.member);
  line.state = MemberLine::State::kDone;
  line.seconds = seconds;
  line.note = "in " + FormatDuration(seconds);
  if (member_accuracy) {
    if (auto accuracy = member_accuracy(a)) line.accuracy = accuracy;
  }
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
