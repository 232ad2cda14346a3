// Device parsing and binding: environment for the launcher, CPU affinity for the worker.
#include "launch/device.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>

namespace cohort::launch {

namespace {

std::string_view Trim(std::string_view text) {
  size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  size_t end = text.find_last_not_of(" \t");
  return text.substr(begin, end - begin + 1);
}

// A non-negative decimal integer that is all of `text`.
bool ParseIndex(std::string_view text, int* value) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *value);
  return ec == std::errc() && ptr == end && *value >= 0;
}

void AppendRange(std::string* list, int first, int last) {
  if (!list->empty()) list->push_back(',');
  *list += std::to_string(first);
  if (last != first) {
    list->push_back('-');
    *list += std::to_string(last);
  }
}

}  // namespace

std::string Device::ToString() const {
  return (kind == Kind::kCuda ? "cuda:" : "cpu:") + std::to_string(index);
}

Result<Device> ParseDevice(std::string_view text) {
  std::string_view t = Trim(text);
  auto error = [&] {
    return Status::InvalidArgument("device \"" + std::string(text) +
                                   "\": expected cpu, cpu:N, cuda or cuda:N");
  };
  Device device;
  std::string_view rest;
  if (t.starts_with("cuda")) {
    device.kind = Device::Kind::kCuda;
    rest = t.substr(4);
  } else if (t.starts_with("cpu")) {
    device.kind = Device::Kind::kCpu;
    rest = t.substr(3);
  } else {
    return error();
  }
  if (rest.empty()) return device;  // index 0
  if (rest.front() != ':' || !ParseIndex(rest.substr(1), &device.index)) return error();
  return device;
}

std::string CpuSetForDevice(int index, int threads, int cpu_count) {
  cpu_count = std::max(cpu_count, 1);
  threads = std::max(threads, 1);
  if (threads >= cpu_count) {
    std::string all;
    AppendRange(&all, 0, cpu_count - 1);
    return all;
  }
  // The cores in order, wrapping at cpu_count; consecutive runs become ranges.
  int64_t first_core = (static_cast<int64_t>(index) * threads) % cpu_count;
  std::string list;
  int run_start = -1;
  int previous = -1;
  for (int i = 0; i < threads; ++i) {
    int core = static_cast<int>((first_core + i) % cpu_count);
    if (run_start >= 0 && core == previous + 1) {
      previous = core;
      continue;
    }
    if (run_start >= 0) AppendRange(&list, run_start, previous);
    run_start = previous = core;
  }
  AppendRange(&list, run_start, previous);
  return list;
}

std::vector<std::pair<std::string, std::string>> DeviceEnvironment(const Device& device,
                                                                   int threads_per_cpu_device,
                                                                   int cpu_count) {
  if (device.is_cuda()) {
    // COHORT_CPU_SET is cleared so that one inherited from the controller's own environment
    // cannot pin a GPU worker.
    return {{"CUDA_VISIBLE_DEVICES", std::to_string(device.index)}, {"COHORT_CPU_SET", ""}};
  }
  std::string threads = std::to_string(std::max(threads_per_cpu_device, 1));
  return {{"CUDA_VISIBLE_DEVICES", ""},
          {"OMP_NUM_THREADS", threads},
          {"MKL_NUM_THREADS", threads},
          {"OPENBLAS_NUM_THREADS", threads},
          {"COHORT_CPU_SET", CpuSetForDevice(device.index, threads_per_cpu_device, cpu_count)}};
}

Result<std::vector<int>> ParseCpuList(std::string_view text) {
  auto error = [&](const std::string& why) {
    return Status::InvalidArgument("cpu list \"" + std::string(text) + "\": " + why);
  };
  std::vector<int> cores;
  std::string_view rest = Trim(text);
  if (rest.empty()) return error("empty");
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = Trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    size_t dash = item.find('-');
    int first = 0;
    int last = 0;
    if (dash == std::string_view::npos) {
      if (!ParseIndex(item, &first)) return error("bad core \"" + std::string(item) + "\"");
      last = first;
    } else if (!ParseIndex(item.substr(0, dash), &first) ||
               !ParseIndex(item.substr(dash + 1), &last) || last < first) {
      return error("bad range \"" + std::string(item) + "\"");
    }
    if (last >= CPU_SETSIZE) return error("core " + std::to_string(last) + " is too large");
    for (int core = first; core <= last; ++core) cores.push_back(core);
    if (comma != std::string_view::npos && rest.empty()) return error("trailing comma");
  }
  return cores;
}

Result<std::vector<Device>> ResolveAutoDevices(std::string spec, int cuda_count, int cpu_count,
                                               int threads) {
  if (threads < 1) {
    return Status::InvalidArgument("devices \"" + spec +
                                   "\": threads per cpu device must be >= 1, got " +
                                   std::to_string(threads));
  }
  std::vector<Device> devices;
  std::string_view text = Trim(spec);
  if (text == "auto") {
    if (cuda_count > 0) {
      for (int i = 0; i < cuda_count; ++i) devices.push_back({Device::Kind::kCuda, i});
    } else {
      int count = std::max(1, std::max(cpu_count, 1) / threads);
      for (int i = 0; i < count; ++i) devices.push_back({Device::Kind::kCpu, i});
    }
    return devices;
  }
  if (text.empty()) return Status::InvalidArgument("devices \"\": expected auto or a device list");
  while (true) {
    size_t comma = text.find(',');
    COHORT_ASSIGN_OR_RETURN(Device device, ParseDevice(text.substr(0, comma)));
    if (device.is_cuda() && device.index >= cuda_count) {
      return Status::InvalidArgument("devices \"" + spec + "\": " + device.ToString() +
                                     " does not exist (" + std::to_string(cuda_count) +
                                     " CUDA devices visible)");
    }
    if (std::find(devices.begin(), devices.end(), device) != devices.end()) {
      return Status::InvalidArgument("devices \"" + spec + "\": " + device.ToString() +
                                     " is listed twice");
    }
    devices.push_back(device);
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  return devices;
}

Status ApplyCpuSetFromEnvironment() {
  const char* value = std::getenv("COHORT_CPU_SET");
  if (value == nullptr || Trim(value).empty()) return Status::OK();
  auto cores = ParseCpuList(value);
  if (!cores.ok()) return cores.status().WithContext("COHORT_CPU_SET");
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int core : *cores) CPU_SET(core, &set);
  if (::sched_setaffinity(0, sizeof(set), &set) != 0) {
    return Status::FromErrno(std::string("COHORT_CPU_SET=") + value + ": sched_setaffinity", errno);
  }
  return Status::OK();
}

}  // namespace cohort::launch
