#include "launch/slurm.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace cohort::launch {

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// Sums Slurm's compressed per-node counts: "4(x2),2" is 4 + 4 + 2.
int64_t SumNodeCounts(std::string_view text) {
  int64_t total = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    std::string_view item = text.substr(pos, end == std::string_view::npos ? text.npos : end - pos);
    int64_t count = 0, repeat = 1;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), count);
    if (ec != std::errc()) return 0;
    if (auto x = item.find("(x"); x != std::string_view::npos) {
      std::from_chars(item.data() + x + 2, item.data() + item.size(), repeat);
    }
    total += count * repeat;
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  return total;
}

// GPUs of the allocation: SLURM_JOB_GPUS lists their ids ("0,1,2,3") on the first node; with
// several nodes, SLURM_GPUS_ON_NODE times the nodes.
int64_t AllocationGpus() {
  int64_t nodes = std::max<int64_t>(1, std::atoll(Env("SLURM_JOB_NUM_NODES").c_str()));
  std::string per_node = Env("SLURM_GPUS_ON_NODE");
  if (!per_node.empty()) return std::atoll(per_node.c_str()) * nodes;
  std::string ids = Env("SLURM_JOB_GPUS");
  if (ids.empty()) return 0;
  return (static_cast<int64_t>(std::count(ids.begin(), ids.end(), ',')) + 1) * nodes;
}

}  // namespace

bool InSlurmAllocation() { return !Env("SLURM_JOB_ID").empty(); }

int AllocationSlots(const SlurmOptions& options) {
  int64_t slots = 0;
  if (options.gpus_per_member > 0) {
    slots = AllocationGpus() / options.gpus_per_member;
  } else {
    int64_t cpus = SumNodeCounts(Env("SLURM_JOB_CPUS_PER_NODE"));
    slots = cpus / std::max(1, options.cpus_per_member);
  }
  return static_cast<int>(std::clamp<int64_t>(slots, 1, 100000));
}

std::vector<std::string> SrunArgv(const SlurmOptions& o, const std::string& job_name,
                                  bool in_allocation, const std::vector<std::string>& command) {
  std::vector<std::string> argv = {"srun", "--ntasks=1", "--nodes=1", "--job-name=" + job_name,
                                   // A worker's stdio is the protocol: no srun labels, and
                                   // the task's death ends the step.
                                   "--kill-on-bad-exit=1"};
  // Inside an allocation a step gets exactly what it asks for, so steps share the nodes.
  if (in_allocation) argv.push_back("--exact");
  if (o.queue_timeout_s > 0) {
    argv.push_back("--immediate=" +
                   std::to_string(std::max(1L, std::lround(std::ceil(o.queue_timeout_s)))));
  }
  auto add = [&](const char* flag, const std::string& value) {
    if (!value.empty()) argv.push_back(std::string(flag) + "=" + value);
  };
  add("--partition", o.partition);
  add("--account", o.account);
  add("--qos", o.qos);
  add("--time", o.time);
  add("--constraint", o.constraint);
  add("--mem", o.mem);
  argv.push_back("--cpus-per-task=" + std::to_string(std::max(1, o.cpus_per_member)));
  if (o.gpus_per_member > 0) argv.push_back("--gpus=" + std::to_string(o.gpus_per_member));
  argv.insert(argv.end(), o.srun_args.begin(), o.srun_args.end());
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

std::vector<std::string> ScancelByNameArgv(const std::string& job_name, const std::string& user) {
  return {"scancel", "--quiet", "--name=" + job_name, "--user=" + user};
}

bool IsLocalBindingVariable(std::string_view name) {
  return name == "CUDA_VISIBLE_DEVICES" || name == "COHORT_CPU_SET";
}

std::string SlurmEndReason(std::string_view log) {
  auto has = [&](std::string_view what) { return log.find(what) != std::string_view::npos; };
  if (has("DUE TO TIME LIMIT")) return "cancelled by Slurm: the step's time limit (slurm.time)";
  if (has("DUE TO PREEMPTION")) return "preempted by Slurm";
  if (has("DUE TO NODE FAILURE") || has("Node failure")) return "node failure";
  // scancel of a step: slurmstepd's banner, or only srun's own words when it was signalled first.
  if (has("CANCELLED AT") || has("srun: Job step aborted")) return "cancelled (scancel)";
  // srun's own refusals: the step never started.
  for (std::string_view marker : {"srun: error: Unable to allocate resources: ",
                                  "srun: error: Unable to create step for job "}) {
    size_t at = log.rfind(marker);
    if (at == std::string_view::npos) continue;
    size_t end = log.find('\n', at);
    std::string_view line = log.substr(at, end == std::string_view::npos ? log.npos : end - at);
    return "the step did not start: " +
           std::string(line.substr(std::string_view("srun: error: ").size()));
  }
  return "";
}

std::string DescribeRequest(const SlurmOptions& o) {
  std::string text = o.partition.empty() ? "default partition" : "partition " + o.partition;
  if (o.gpus_per_member > 0) {
    text += ", " + std::to_string(o.gpus_per_member) + (o.gpus_per_member == 1 ? " GPU" : " GPUs");
  }
  int cpus = std::max(1, o.cpus_per_member);
  text += ", " + std::to_string(cpus) + (cpus == 1 ? " CPU" : " CPUs");
  if (!o.mem.empty()) text += ", " + o.mem + " memory";
  return text;
}

}  // namespace cohort::launch
