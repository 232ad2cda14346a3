#include "loop/display.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

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

TEST(DisplayTest, FormatDuration) {
  EXPECT_EQ(FormatDuration(0), "0s");
  EXPECT_EQ(FormatDuration(42.4), "42s");
  EXPECT_EQ(FormatDuration(65), "1m05s");
  EXPECT_EQ(FormatDuration(7380), "2h03m");
  EXPECT_EQ(FormatDuration(-1), "?");
}

}  // namespace
}  // namespace cohort::loop
