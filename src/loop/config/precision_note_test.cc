#include "loop/config/precision_note.h"

#include <gtest/gtest.h>

#include <string>

namespace cohort::loop {
namespace {

LoopConfig Parse(const std::string& devices, const std::string& a_fields,
                 const std::string& b_fields, const std::string& launcher = "local") {
  const std::string text = "name = \"demo\"\ndevices = " + devices + "\nlauncher = \"" + launcher +
                           "\"\n" + (launcher == "slurm" ? "[slurm]\nslots = 2\n" : "") +
                           R"(
[store]
source = "store"

[defaults]
epochs = 1

[[member]]
name = "a"
model = "dense 16 relu, dense 10"
)" + a_fields + R"(

[[member]]
name = "b"
model = "dense 16 relu, dense 10"
)" + b_fields + R"(

[[member]]
name = "outside"
command = ["python3", "member.py"]
precision = "bf16"

[acquisition]
strategy = "entropy"
batch_size = 10

[stop]
max_rounds = 2
)";
  auto c = ParseLoopConfig(text, "loop.toml", "/base");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : LoopConfig{};
}

TEST(PrecisionNoteTest, NamesTheNativeBf16MembersOnACpuWithoutBf16Kernels) {
  LoopConfig c =
      Parse(R"(["cpu:0", "cpu:1"])", "precision = \"bf16\"", "pool_precision = \"bf16\"");
  auto note = EmulatedBf16Note(c, /*cpu_has_bf16_kernels=*/false);
  ASSERT_TRUE(note.has_value());
  // Not the outside member: its script decides its own precision.
  EXPECT_EQ(note->rfind("members a, b compute in bf16 (precision or pool_precision) on CPU "
                        "devices, but this CPU lacks the AVX-512 instructions",
                        0),
            0u)
      << *note;
  EXPECT_EQ(note->find('\n'), std::string::npos);
  EXPECT_FALSE(EmulatedBf16Note(c, /*cpu_has_bf16_kernels=*/true).has_value());

  c = Parse(R"(["cpu:0"])", "", "precision = \"bf16\"\npool_precision = \"fp32\"");
  note = EmulatedBf16Note(c, false);
  ASSERT_TRUE(note.has_value());
  EXPECT_EQ(note->rfind("member b computes in bf16", 0), 0u) << *note;
}

TEST(PrecisionNoteTest, SaysNothingWithoutBf16OrOffTheLocalCpu) {
  EXPECT_FALSE(EmulatedBf16Note(Parse(R"(["cpu:0"])", "", "pool_precision = \"fp32\""), false));
  EXPECT_FALSE(
      EmulatedBf16Note(Parse(R"(["cuda:0", "cuda:1"])", "precision = \"bf16\"", ""), false));
  EXPECT_TRUE(EmulatedBf16Note(Parse(R"(["cuda:0", "cpu:0"])", "precision = \"bf16\"", ""), false));
  // Slurm's nodes are not the controller's CPU.
  EXPECT_FALSE(EmulatedBf16Note(Parse("\"auto\"", "precision = \"bf16\"", "", "slurm"), false));
}

}  // namespace
}  // namespace cohort::loop
