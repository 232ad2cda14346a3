// Devices and how a worker is bound to one (docs/design.md, "Devices").
//
// A device is `cuda:N` (one GPU) or `cpu:N` (a set of cores). The launcher binds a worker to
// it through the environment it is started with, DeviceEnvironment():
//   cuda:N  CUDA_VISIBLE_DEVICES=N, so the worker sees that one GPU as cuda:0;
//   cpu:N   CUDA_VISIBLE_DEVICES= (no GPU), OMP/MKL/OPENBLAS_NUM_THREADS=threads and
//           COHORT_CPU_SET=<cores>, the cores [N*threads, (N+1)*threads) modulo the core count,
//           which the worker applies to itself with ApplyCpuSetFromEnvironment() first thing
//           in main(), before any thread exists, so every thread it starts inherits it.
//
// Thread-safety: all functions are pure except ApplyCpuSetFromEnvironment(), which sets the
// calling thread's CPU affinity (call it while the process has one thread).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace cohort::launch {

struct Device {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = 0;

  bool is_cuda() const { return kind == Kind::kCuda; }
  // "cpu:0", "cuda:1".
  std::string ToString() const;
  bool operator==(const Device&) const = default;
};

// "cpu:N", "cuda:N", "cpu" (= cpu:0), "cuda" (= cuda:0). Surrounding spaces are allowed.
// Errors name the text: `device "gpu:1": expected cpu, cpu:N, cuda or cuda:N`.
Result<Device> ParseDevice(std::string_view text);

// The environment variables that bind a worker to `device` (see above). `threads_per_cpu_device`
// (>= 1) is the cores per cpu device; `cpu_count` (>= 1) the cores of the machine.
std::vector<std::pair<std::string, std::string>> DeviceEnvironment(const Device& device,
                                                                   int threads_per_cpu_device,
                                                                   int cpu_count);

// The cores of cpu:`index` as a Linux cpu list ("0-3", "6-7,0-1" when it wraps): cores
// [index*threads, (index+1)*threads) modulo `cpu_count`, all cores when threads >= cpu_count.
std::string CpuSetForDevice(int index, int threads, int cpu_count);

// Parses a Linux cpu list ("0-3,8,10-11") into core numbers, in the order written.
Result<std::vector<int>> ParseCpuList(std::string_view text);

// Devices for a run: "auto" is every GPU (cuda:0 .. cuda:cuda_count-1), or when there is none,
// cpu_count/threads cpu devices (at least one). Anything else is a comma-separated list of
// devices ("cuda:0,cuda:1", "cpu:0,cpu:1"); a cuda index at or beyond cuda_count, a device
// listed twice, or threads < 1 is an error naming it.
Result<std::vector<Device>> ResolveAutoDevices(std::string spec, int cuda_count, int cpu_count,
                                               int threads);

// For the worker process: when COHORT_CPU_SET is set and not empty, pins the calling thread
// (and so every thread created after it) to those cores with sched_setaffinity. Unset or
// empty: does nothing. Errors name the variable's text (a bad list, no usable core).
Status ApplyCpuSetFromEnvironment();

}  // namespace cohort::launch
