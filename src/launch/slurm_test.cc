#include "launch/slurm.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>

namespace cohort::launch {
namespace {

TEST(SlurmTest, SrunArgvAsksForOneTaskWithTheMembersResources) {
  SlurmOptions o;
  o.partition = "gpu";
  o.account = "proj";
  o.time = "1:00:00";
  o.mem = "8G";
  o.cpus_per_member = 4;
  o.gpus_per_member = 1;
  o.srun_args = {"--exclusive"};
  o.queue_timeout_s = 2.5;
  auto argv = SrunArgv(o, "cohort-w", false, {"cohort-member", "worker"});
  std::vector<std::string> want = {"srun",
                                   "--ntasks=1",
                                   "--nodes=1",
                                   "--job-name=cohort-w",
                                   "--kill-on-bad-exit=1",
                                   "--immediate=3",
                                   "--partition=gpu",
                                   "--account=proj",
                                   "--time=1:00:00",
                                   "--mem=8G",
                                   "--cpus-per-task=4",
                                   "--gpus=1",
                                   "--exclusive",
                                   "cohort-member",
                                   "worker"};
  EXPECT_EQ(argv, want);
  // Inside an allocation the step takes exactly what it asks for.
  auto inside = SrunArgv(SlurmOptions{}, "j", true, {"x"});
  EXPECT_NE(std::find(inside.begin(), inside.end(), "--exact"), inside.end());
  EXPECT_EQ(std::find(inside.begin(), inside.end(), "--partition="), inside.end());
}

TEST(SlurmTest, EndReasonsInWords) {
  EXPECT_EQ(SlurmEndReason("slurmstepd: error: *** STEP 12.0 ON n1 CANCELLED AT 2026-12-03T10:00 "
                           "DUE TO TIME LIMIT ***\n"),
            "cancelled by Slurm: the step's time limit (slurm.time)");
  EXPECT_EQ(SlurmEndReason("*** JOB 12 ON n1 CANCELLED AT x DUE TO PREEMPTION ***"),
            "preempted by Slurm");
  EXPECT_EQ(SlurmEndReason("*** STEP 3.0 ON n1 CANCELLED AT 2026-12-03T10:00:00 ***"),
            "cancelled (scancel)");
  EXPECT_EQ(SlurmEndReason("srun: job 5 queued and waiting for resources\n"
                           "srun: error: Unable to allocate resources: Requested nodes are busy\n"),
            "the step did not start: Unable to allocate resources: Requested nodes are busy");
  EXPECT_EQ(SlurmEndReason("srun: Job step aborted: Waiting up to 7 seconds for job step to "
                           "finish.\nsrun: error: vm: task 0: Terminated\n"),
            "cancelled (scancel)");
  EXPECT_EQ(SlurmEndReason("a plain crash\n"), "");
}

TEST(SlurmTest, AllocationSlotsCountGpusOrCpusAcrossNodes) {
  setenv("SLURM_JOB_NUM_NODES", "2", 1);
  setenv("SLURM_JOB_CPUS_PER_NODE", "8(x2)", 1);
  unsetenv("SLURM_GPUS_ON_NODE");
  setenv("SLURM_JOB_GPUS", "0,1,2,3", 1);
  SlurmOptions o;
  o.cpus_per_member = 4;
  EXPECT_EQ(AllocationSlots(o), 4);  // 16 CPUs / 4
  o.gpus_per_member = 2;
  EXPECT_EQ(AllocationSlots(o), 4);  // 4 GPUs x 2 nodes / 2
  setenv("SLURM_GPUS_ON_NODE", "1", 1);
  EXPECT_EQ(AllocationSlots(o), 1);  // never 0
  for (const char* v :
       {"SLURM_JOB_NUM_NODES", "SLURM_JOB_CPUS_PER_NODE", "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE"}) {
    unsetenv(v);
  }
}

TEST(SlurmTest, DescribesTheRequest) {
  SlurmOptions o;
  o.partition = "debug";
  o.gpus_per_member = 1;
  EXPECT_EQ(DescribeRequest(o), "partition debug, 1 GPU, 1 CPU");
}

}  // namespace
}  // namespace cohort::launch
