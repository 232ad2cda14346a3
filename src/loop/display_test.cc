#include "loop/display.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace cohort::loop {
namespace {

// Captures what a Display writes.
class Captured {
 public:
  Captured() { file_ = open_memstream(&buffer_, &size_); }
  ~Captured() {
    std::fclose(file_);
    std::free(buffer_);
  }
  FILE* file() { return file_; }
  std::string text() {
    std::fflush(file_);
    return std::string(buffer_, size_);
  }

 private:
  FILE* file_ = nullptr;
  char* buffer_ = nullptr;
  size_t size_ = 0;
};

TEST(DisplayTest, PlainOutputHasNoControlSequences) {
  Captured out;
  {
    Display d(out.file(), DisplayOptions{.terminal = 0, .color = 1});
    EXPECT_FALSE(d.terminal());
    d.StartRound(2, 5, 3000, 0.8123, {"a", "b"});
    d.member(0).state = MemberLine::State::kTraining;
    d.member(0).device = "cpu:0";
    d.member(0).epoch = 2;
    d.member(0).epochs = 5;
    d.member(0).step = 10;
    d.member(0).steps = 40;
    d.member(0).loss = 0.5;
    d.Refresh(true);
    d.Note("round 2 done");
  }
  std::string text = out.text();
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_NE(text.find("round 2  generation 5  labels 3000  last test accuracy 0.8123\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("epoch 2/5 step 10/40 loss 0.5000"), std::string::npos) << text;
  EXPECT_EQ(text.find("  b "), std::string::npos) << "queued members are not repeated: " << text;
  EXPECT_NE(text.find("round 2 done\n"), std::string::npos);
}

TEST(DisplayTest, TerminalRedrawsInPlaceAndColorIsOptional) {
  for (int color : {0, 1}) {
    Captured out;
    {
      Display d(out.file(), DisplayOptions{.terminal = 1, .color = color});
      d.StartRound(0, 1, 100, std::nullopt, {"a"});
      d.member(0).state = MemberLine::State::kDone;
      d.Refresh(true);
      d.Note("note");
    }
    std::string text = out.text();
    EXPECT_NE(text.find("\x1b[1A\x1b[2K"), std::string::npos) << "block erased before redraw";
    bool has_color = text.find("\x1b[32m") != std::string::npos;
    EXPECT_EQ(has_color, color == 1) << text;
    EXPECT_NE(text.find("note\n"), std::string::npos);
  }
}

TEST(DisplayTest, NoColorEnvironmentTurnsColorOff) {
  ::setenv("NO_COLOR", "1", 1);
  Captured out;
  {
    Display d(out.file(), DisplayOptions{.terminal = 1});
    d.StartRound(0, 1, 100, std::nullopt, {"a"});
    d.member(0).state = MemberLine::State::kFailed;
    d.Refresh(true);
  }
  ::unsetenv("NO_COLOR");
  std::string text = out.text();
  EXPECT_EQ(text.find("\x1b[31m"), std::string::npos) << text;
  EXPECT_EQ(text.find("\x1b[1m"), std::string::npos) << text;
}

// The lines of `text` with colour and erase sequences taken out.
std::vector<std::string> VisibleLines(const std::string& text) {
  std::vector<std::string> lines;
  std::string line;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\x1b') {
      size_t end = text.find_first_of("mAK", i);
      i = end == std::string::npos ? text.size() : end;
    } else if (text[i] == '\n') {
      lines.push_back(line);
      line.clear();
    } else {
      line += text[i];
    }
  }
  return lines;
}

TEST(DisplayTest, TerminalLinesAreCutToTheWidth) {
  for (int color : {0, 1}) {
    Captured out;
    {
      Display d(out.file(), DisplayOptions{.terminal = 1, .color = color, .width = 40});
      d.StartRound(3, 7, 12000, 0.9, {"a-member-with-a-long-name", "b"});
      d.member(0).state = MemberLine::State::kTraining;
      d.member(0).device = "cuda:0";
      d.member(0).epoch = 2;
      d.member(0).epochs = 10;
      d.member(0).step = 100;
      d.member(0).steps = 400;
      d.member(0).loss = 0.25;
      d.member(0).retries = 1;
      d.Refresh(true);
    }
    std::string text = out.text();
    auto lines = VisibleLines(text);
    ASSERT_GE(lines.size(), 4u) << text;
    for (const std::string& line : lines) EXPECT_LE(line.size(), 40u) << line;
    EXPECT_NE(text.find("round 3  generation 7  labels 12000  la"), std::string::npos) << text;
    if (color == 1) {
      EXPECT_NE(text.find("\x1b[0m\n"), std::string::npos) << "colour closed";
    }
  }
  EXPECT_EQ(CutToWidth("abc", 0), "abc");
  EXPECT_EQ(CutToWidth("abcdef", 4), "abcd");
  EXPECT_EQ(CutToWidth("\x1b[1mabcdef\x1b[0m", 2), "\x1b[1mab\x1b[0m");
  EXPECT_EQ(CutToWidth("h\xc3\xa9llo", 2), "h\xc3\xa9");  // "hé": 2 columns, 3 bytes
}

TEST(DisplayTest, RunLineCountsMembersAndEstimatesTheRound) {
  Captured out;
  {
    Display d(out.file(), DisplayOptions{.terminal = 1, .color = 0, .width = 0});
    d.StartRound(0, 1, 100, std::nullopt, {"a", "b", "c", "d"});
    auto now = std::chrono::steady_clock::now();
    d.member(0).state = MemberLine::State::kDone;
    d.member(0).seconds = 60;
    d.member(0).accuracy = 0.8125;
    d.member(1).state = MemberLine::State::kTraining;
    d.member(1).started = now - std::chrono::seconds(20);
    d.member(1).epochs = 3;
    d.member(1).epoch = 1;
    d.member(1).eta_s = 40;
    d.member(2).state = MemberLine::State::kPredicting;
    d.member(2).started = now - std::chrono::seconds(50);
    d.member(2).since = now - std::chrono::seconds(5);
    d.Refresh(true);
    // Two rounds after this one, 5 minutes each: the run's ETA adds them.
    d.SetRunPlan(2, 300);
    d.Refresh(true);
  }
  std::string text = out.text();
  // 1 done, 2 running, 1 queued: the slowest running ETA (40 s) plus one wave of a member's
  // typical time (60 s, from the done one).
  EXPECT_NE(text.find("  members 1 done, 2 running, 1 queued  elapsed 0s  round eta 1m40s\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("round eta 1m40s  run eta 11m40s\n"), std::string::npos) << text;
  EXPECT_NE(text.find("predicting 5s"), std::string::npos) << text;
  EXPECT_NE(text.find("done       test accuracy 0.8125"), std::string::npos) << text;
}

TEST(DisplayTest, EpochOnlyProgressShowsNoSteps) {
  Captured out;
  {
    Display d(out.file(), DisplayOptions{.terminal = 0, .color = 0});
    d.StartRound(0, 1, 100, std::nullopt, {"script"});
    d.member(0).state = MemberLine::State::kTraining;
    d.member(0).epoch = 2;
    d.member(0).epochs = 5;
    d.member(0).loss = 0.5;
    d.Refresh(true);
  }
  std::string text = out.text();
  EXPECT_NE(text.find("epoch 2/5 loss 0.5000"), std::string::npos) << text;
  EXPECT_EQ(text.find("step"), std::string::npos) << text;
}

TEST(DisplayTest, ProgressObserverTimesPredictingAndKeepsTheAttemptTime) {
  Captured out;
  Display d(out.file(), DisplayOptions{.terminal = 0, .color = 0});
  d.StartRound(0, 1, 100, std::nullopt, {"a"});
  DisplayProgress p(&d);
  AttemptRef ref{.round = 0, .member = 0, .member_name = "a", .slot = "cpu:0", .attempt = 1};
  p.AttemptStarted(ref);
  EXPECT_NE(d.member(0).started, std::chrono::steady_clock::time_point{});
  p.Predicting(ref);
  EXPECT_EQ(d.member(0).state, MemberLine::State::kPredicting);
  auto since = d.member(0).since;
  p.Predicting(ref);  // the test pass after the pool pass: still the same phase
  EXPECT_EQ(d.member(0).since, since);
  p.AttemptDone(ref, 12.5);
  EXPECT_EQ(d.member(0).seconds, 12.5);
  EXPECT_FALSE(d.member(0).accuracy);  // nobody to ask
  // With the controller's hook, a member's accuracy shows the moment its attempt is done.
  AttemptRef asked;
  p.member_accuracy = [&](const AttemptRef& a) -> std::optional<double> {
    asked = a;
    return 0.75;
  };
  ref.attempt = 2;
  p.AttemptDone(ref, 3);
  EXPECT_EQ(asked.attempt, 2);
  EXPECT_EQ(d.member(0).accuracy, 0.75);
}

TEST(DisplayTest, FormatDuration) {
  EXPECT_EQ(FormatDuration(0), "0s");
  EXPECT_EQ(FormatDuration(42.4), "42s");
  EXPECT_EQ(FormatDuration(65), "1m05s");
  EXPECT_EQ(FormatDuration(7380), "2h03m");
  EXPECT_EQ(FormatDuration(-1), "?");
}

}  // namespace
}  // namespace cohort::loop
