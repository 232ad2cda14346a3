#include "cli/run/sbatch_command.h"

#include <gtest/gtest.h>

#include <string>

namespace cohort::cli {
namespace {

// A config with launcher = "slurm"; `slurm` is the [slurm] table's body.
loop::LoopConfig SlurmConfig(const std::string& slurm, const std::string& base = "/work/exp") {
  std::string text = R"(name = "fmnist"
devices = "auto"
launcher = "slurm"

[store]
source = "data/store"

[[member]]
name = "a"
model = "dense 10"

[acquisition]
strategy = "entropy"
batch_size = 10

[stop]
max_rounds = 2

[slurm]
)" + slurm;
  auto config = loop::ParseLoopConfig(text, base + "/loop.toml", base);
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  return config.ok() ? *config : loop::LoopConfig{};
}

std::string Script(const SbatchOptions& options, const loop::LoopConfig& config,
                   const std::string& binary = "/opt/cohort/bin/cohort") {
  auto script = BatchScript(options, config, binary);
  EXPECT_TRUE(script.ok()) << script.status().ToString();
  return script.ok() ? *script : "";
}

bool Has(const std::string& script, const std::string& line) {
  return script.find("\n" + line + "\n") != std::string::npos;
}

TEST(SbatchTest, DirectivesFromTheConfig) {
  SbatchOptions options;
  options.config = "/work/exp/loop.toml";
  std::string s = Script(options, SlurmConfig("partition = \"gpu\"\naccount = \"proj\"\n"
                                              "gpus_per_member = 1\ncpus_per_member = 4\n"));
  EXPECT_EQ(s.rfind("#!/bin/bash\n", 0), 0u) << s;
  for (const char* line :
       {"#SBATCH --job-name=fmnist", "#SBATCH --output=/work/exp/runs/fmnist/workers/slurm-%j.out",
        "#SBATCH --open-mode=append", "#SBATCH --requeue", "#SBATCH --signal=B:TERM@120",
        "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1", "#SBATCH --cpus-per-task=4",
        "#SBATCH --gres=gpu:1", "#SBATCH --partition=gpu", "#SBATCH --account=proj",
        "exec /opt/cohort/bin/cohort run /work/exp/loop.toml"}) {
    EXPECT_TRUE(Has(s, line)) << line << "\n" << s;
  }
  EXPECT_EQ(s.find("--time"), std::string::npos) << s;
  EXPECT_EQ(s.find("--qos"), std::string::npos) << s;
  // The script ends with the exec: nothing after it would run.
  EXPECT_EQ(s.substr(s.rfind("\nexec ")),
            "\nexec /opt/cohort/bin/cohort run /work/exp/loop.toml\n");
  // Every directive comes before the first command (sbatch stops reading there).
  EXPECT_LT(s.rfind("#SBATCH"), s.find("\nexec "));
}

TEST(SbatchTest, OptionsOverrideTheDefaults) {
  SbatchOptions options;
  options.config = "/work/exp/loop.toml";
  options.nodes = 2;
  options.gpus_per_node = 4;
  options.time = "1-00:00:00";
  options.partition = "a100";
  options.account = "other";
  std::string s = Script(options, SlurmConfig("partition = \"gpu\"\naccount = \"proj\"\n"
                                              "gpus_per_member = 2\ncpus_per_member = 3\n"
                                              "qos = \"high\"\nconstraint = \"a100\"\n"));
  for (const char* line : {"#SBATCH --nodes=2", "#SBATCH --gres=gpu:4", "#SBATCH --time=1-00:00:00",
                           "#SBATCH --partition=a100", "#SBATCH --account=other",
                           "#SBATCH --qos=high", "#SBATCH --constraint=a100",
                           // Two steps of 2 GPUs per node, 3 CPUs each.
                           "#SBATCH --cpus-per-task=6"}) {
    EXPECT_TRUE(Has(s, line)) << line << "\n" << s;
  }
  options.cpus_per_task = 16;
  EXPECT_TRUE(
      Has(Script(options, SlurmConfig("gpus_per_member = 2\n")), "#SBATCH --cpus-per-task=16"));
}

TEST(SbatchTest, CpuMembersAskForNoGpus) {
  SbatchOptions options;
  options.config = "/work/exp/loop.toml";
  std::string s = Script(options, SlurmConfig("cpus_per_member = 2\nmem = \"8G\"\n"));
  EXPECT_EQ(s.find("gpu"), std::string::npos) << s;
  EXPECT_TRUE(Has(s, "#SBATCH --cpus-per-task=2")) << s;
  EXPECT_NE(s.find("--mem=8G (slurm.mem)"), std::string::npos) << s;
  // Asked for explicitly, GPUs are allowed even when members use none.
  options.gpus_per_node = 2;
  EXPECT_TRUE(Has(Script(options, SlurmConfig("")), "#SBATCH --gres=gpu:2"));
}

TEST(SbatchTest, PathsWithSpacesAndQuotesAreQuoted) {
  SbatchOptions options;
  options.config = "/home/me/my exp/it's.toml";
  options.partition = "gpu long";
  loop::LoopConfig config = SlurmConfig("", "/home/me/my exp");
  std::string s = Script(options, config, "/opt/co hort/cohort");
  EXPECT_TRUE(Has(s, "exec '/opt/co hort/cohort' run '/home/me/my exp/it'\\''s.toml'")) << s;
  // sbatch splits directive values itself: quotes group, a backslash escapes.
  EXPECT_TRUE(Has(s, "#SBATCH --output='/home/me/my exp/runs/fmnist/workers/slurm-%j.out'")) << s;
  EXPECT_TRUE(Has(s, "#SBATCH --partition='gpu long'")) << s;
  // Inside sbatch's quotes a backslash escapes the next character, a quote included.
  options.account = "it's a\\b";
  EXPECT_TRUE(Has(Script(options, config), "#SBATCH --account='it\\'s a\\\\b'")) << s;
  // A '%' of the path is not a Slurm pattern.
  config.run_dir = "/scratch/100%/run";
  EXPECT_NE(Script(options, config).find("--output=/scratch/100%%/run/workers/slurm-%j.out"),
            std::string::npos);
  config.run_dir = "/a\nb";
  EXPECT_FALSE(BatchScript(options, config, "/bin/cohort").ok());
}

TEST(SbatchTest, ShellQuote) {
  EXPECT_EQ(ShellQuote("/plain/path-1.2_x"), "/plain/path-1.2_x");
  EXPECT_EQ(ShellQuote("a b"), "'a b'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote("$HOME `x` \"q\" \\"), "'$HOME `x` \"q\" \\'");
  EXPECT_EQ(ShellQuote(""), "''");
}

TEST(SbatchTest, RefusesALocalConfigAndTooFewGpus) {
  auto local = loop::ParseLoopConfig(R"(name = "x"
devices = ["cpu:0"]
[store]
source = "s"
[[member]]
name = "a"
model = "dense 10"
[acquisition]
strategy = "random"
batch_size = 1
[stop]
max_rounds = 1
)",
                                     "/w/loop.toml", "/w");
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  SbatchOptions options;
  options.config = "/w/loop.toml";
  auto script = BatchScript(options, *local, "/bin/cohort");
  ASSERT_FALSE(script.ok());
  EXPECT_EQ(script.status().message(),
            "/w/loop.toml: launcher is \"local\": cohort sbatch needs launcher = \"slurm\" and "
            "a [slurm] table (docs/slurm.md)");

  options.gpus_per_node = 1;
  script = BatchScript(options, SlurmConfig("gpus_per_member = 2\n"), "/bin/cohort");
  ASSERT_FALSE(script.ok());
  EXPECT_NE(script.status().message().find("--gpus-per-node 1"), std::string::npos)
      << script.status().message();
  EXPECT_EQ(script.status().message().find('\n'), std::string::npos);
}

}  // namespace
}  // namespace cohort::cli
