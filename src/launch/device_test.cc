// Tests for device parsing, binding environments and CPU sets.
#include "launch/device.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <cstdlib>
#include <thread>

namespace cohort::launch {
namespace {

using Env = std::vector<std::pair<std::string, std::string>>;

std::string Quoted(const char* text) {
  std::string quoted = "\"";
  quoted += text;
  quoted.push_back('"');
  return quoted;
}

TEST(DeviceTest, Parse) {
  auto cpu = ParseDevice("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(*cpu, (Device{Device::Kind::kCpu, 0}));
  EXPECT_EQ(ParseDevice("cpu:3")->ToString(), "cpu:3");
  EXPECT_EQ(ParseDevice(" cuda:1 ")->ToString(), "cuda:1");
  EXPECT_EQ(ParseDevice("cuda")->ToString(), "cuda:0");
  for (const char* bad : {"", "gpu:1", "cuda:", "cuda:-1", "cuda:1x", "cpu0", "cpux", "cuda:a"}) {
    auto d = ParseDevice(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_TRUE(d.status().IsInvalidArgument());
    EXPECT_NE(d.status().message().find(Quoted(bad)), std::string::npos) << d.status().message();
  }
}

TEST(DeviceTest, CudaEnvironment) {
  EXPECT_EQ(DeviceEnvironment({Device::Kind::kCuda, 2}, 4, 16),
            (Env{{"CUDA_VISIBLE_DEVICES", "2"}, {"COHORT_CPU_SET", ""}}));
}

TEST(DeviceTest, CpuEnvironment) {
  EXPECT_EQ(DeviceEnvironment({Device::Kind::kCpu, 1}, 4, 16), (Env{{"CUDA_VISIBLE_DEVICES", ""},
                                                                    {"OMP_NUM_THREADS", "4"},
                                                                    {"MKL_NUM_THREADS", "4"},
                                                                    {"OPENBLAS_NUM_THREADS", "4"},
                                                                    {"COHORT_CPU_SET", "4-7"}}));
}

TEST(DeviceTest, CpuSets) {
  EXPECT_EQ(CpuSetForDevice(0, 1, 8), "0");
  EXPECT_EQ(CpuSetForDevice(0, 4, 8), "0-3");
  EXPECT_EQ(CpuSetForDevice(1, 4, 8), "4-7");
  EXPECT_EQ(CpuSetForDevice(2, 4, 8), "0-3");    // modulo the core count
  EXPECT_EQ(CpuSetForDevice(1, 3, 4), "3,0-1");  // wraps
  EXPECT_EQ(CpuSetForDevice(0, 16, 8), "0-7");   // more threads than cores: all of them
  EXPECT_EQ(CpuSetForDevice(5, 1, 1), "0");
}

TEST(DeviceTest, ParseCpuList) {
  EXPECT_EQ(*ParseCpuList("0-3"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(*ParseCpuList("3,0-1"), (std::vector<int>{3, 0, 1}));
  EXPECT_EQ(*ParseCpuList(" 5 "), (std::vector<int>{5}));
  for (const char* bad : {"", "a", "3-1", "1,", "1-", "-1", "0-99999"}) {
    auto cores = ParseCpuList(bad);
    ASSERT_FALSE(cores.ok()) << bad;
    EXPECT_NE(cores.status().message().find(Quoted(bad)), std::string::npos);
  }
}

TEST(DeviceTest, ResolveAuto) {
  auto gpus = ResolveAutoDevices("auto", 2, 16, 4);
  ASSERT_TRUE(gpus.ok());
  EXPECT_EQ(*gpus, (std::vector<Device>{{Device::Kind::kCuda, 0}, {Device::Kind::kCuda, 1}}));
  auto cpus = ResolveAutoDevices("auto", 0, 16, 4);
  ASSERT_TRUE(cpus.ok());
  ASSERT_EQ(cpus->size(), 4u);
  EXPECT_EQ((*cpus)[3], (Device{Device::Kind::kCpu, 3}));
  EXPECT_EQ(ResolveAutoDevices("auto", 0, 2, 8)->size(), 1u);  // at least one
  auto list = ResolveAutoDevices("cuda:1, cpu:0", 2, 8, 1);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(*list, (std::vector<Device>{{Device::Kind::kCuda, 1}, {Device::Kind::kCpu, 0}}));

  auto missing = ResolveAutoDevices("cuda:2", 2, 8, 1);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cuda:2"), std::string::npos);
  auto twice = ResolveAutoDevices("cpu:0,cpu", 0, 8, 1);
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("twice"), std::string::npos);
  EXPECT_FALSE(ResolveAutoDevices("auto", 0, 8, 0).ok());
  EXPECT_FALSE(ResolveAutoDevices("", 0, 8, 1).ok());
  EXPECT_FALSE(ResolveAutoDevices("cpu:0,,cpu:1", 0, 8, 1).ok());
}

// Runs `body` in a thread of its own, so the affinity it sets does not stay with the test.
template <typename Body>
void InThread(Body body) {
  std::thread t(body);
  t.join();
}

TEST(DeviceTest, ApplyCpuSetFromEnvironment) {
  InThread([] {
    ::unsetenv("COHORT_CPU_SET");
    EXPECT_TRUE(ApplyCpuSetFromEnvironment().ok());  // unset: nothing to do
    ::setenv("COHORT_CPU_SET", "", 1);
    EXPECT_TRUE(ApplyCpuSetFromEnvironment().ok());

    cpu_set_t allowed;
    ASSERT_EQ(::sched_getaffinity(0, sizeof(allowed), &allowed), 0);
    int core = 0;
    while (!CPU_ISSET(core, &allowed)) ++core;  // one core this process may use
    ::setenv("COHORT_CPU_SET", std::to_string(core).c_str(), 1);
    Status s = ApplyCpuSetFromEnvironment();
    ASSERT_TRUE(s.ok()) << s.ToString();
    cpu_set_t now;
    ASSERT_EQ(::sched_getaffinity(0, sizeof(now), &now), 0);
    EXPECT_EQ(CPU_COUNT(&now), 1);
    EXPECT_TRUE(CPU_ISSET(core, &now));

    ::setenv("COHORT_CPU_SET", "zero", 1);
    s = ApplyCpuSetFromEnvironment();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("COHORT_CPU_SET"), std::string::npos);
    EXPECT_NE(s.message().find("zero"), std::string::npos);
    ::unsetenv("COHORT_CPU_SET");
  });
}

}  // namespace
}  // namespace cohort::launch
