// Preparing a run (controller_impl.h): its config, devices, Slurm slots, the store check, the run
// directory and the scheduler on its process host.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>
#include <vector>

#include "common/file_util.h"
#include "common/worker_protocol.h"
#include "launch/local_process_host.h"
#include "launch/slurm_process_host.h"
#include "loop/acquire/round_seeds.h"
#include "loop/config/class_labels.h"
#include "loop/config/config.h"
#include "loop/config/config_check.h"
#include "loop/config/precision_note.h"
#include "loop/controller_impl.h"
#include "loop/ensemble/calibration.h"
#include "loop/ensemble/metrics.h"
#include "loop/ensemble/predictions.h"
#include "loop/ensemble/regression.h"
#include "loop/resume_plan.h"
#include "loop/run/crash_point.h"
#include "loop/run/journal.h"
#include "loop/run/run_dir.h"
#include "loop/schedule/scheduler.h"
#include "loop/stop_rules.h"
#include "loop/update/acquire_commit.h"
#include "loop/update/update_step.h"
#include "store/snapshot.h"
#include "store/store.h"
#include "store/transaction.h"

namespace cohort::loop {

namespace {

namespace fs = std::filesystem;

constexpr std::chrono::milliseconds kKillGrace{5000};

// CUDA devices this machine shows, without linking a CUDA library: CUDA_VISIBLE_DEVICES when
// set, else the /dev/nvidiaN device files.
int VisibleCudaDevices() {
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::string v = visible;
    if (v.empty()) return 0;
    return static_cast<int>(std::count(v.begin(), v.end(), ',')) + 1;
  }
  int n = 0;
  while (fs::exists("/dev/nvidia" + std::to_string(n))) ++n;
  return n;
}

int CpuCount() {
  const auto n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace

Status Controller::LoadConfig() {
  // Read once: the text parsed is the text the run keeps.
  COHORT_ASSIGN_OR_RETURN(config_text_, ReadLoopConfigText(options_.config_path));
  COHORT_ASSIGN_OR_RETURN(config_, ParseLoopConfig(config_text_, options_.config_path));
  for (size_t i = 1; i < config_.updates.size(); ++i) {
    // The acquire step picks pool rows by the members' predictions of the round's generation;
    // after a command step that changed the pool, those rows would be other samples.
    const UpdateStepConfig& u = config_.updates[i];
    if (u.kind == UpdateStepConfig::Kind::kAcquire) {
      return Status::InvalidArgument(fmt::format(
          "{}:{}: update: the acquire step must be the first [[update]] step (it picks pool "
          "rows by the round's predictions, which a step before it could move)",
          config_.path, u.line));
    }
  }
  cpus_ = CpuCount();
  if (config_.launcher == Launcher::kSlurm) return ResolveSlurmSlots();
  if (config_.devices_auto) {
    auto devices = launch::ResolveAutoDevices("auto", VisibleCudaDevices(), cpus_,
                                              config_.threads_per_cpu_device);
    if (!devices.ok()) return devices.status().WithContext(config_.path + ": devices");
    config_.devices = *devices;
  }
  return Status::OK();
}

Status Controller::ResolveSlurmSlots() {
  const launch::SlurmOptions& slurm = config_.slurm;
  int slots = 0;
  if (launch::InSlurmAllocation()) {
    slots = launch::AllocationSlots(slurm);
  } else if (slurm.slots > 0) {
    slots = slurm.slots;
  } else {
    return Status::InvalidArgument(
        config_.path +
        ": slurm.slots: missing: outside a Slurm allocation, say how many steps run at once "
        "(each a job of its own), or run inside one (`cohort sbatch`, salloc)");
  }
  // One slot per worker step; Slurm binds its GPUs (as cuda:0 inside the step) or CPUs.
  config_.devices.clear();
  for (int i = 0; i < slots; ++i) {
    config_.devices.push_back(launch::Device{
        slurm.gpus_per_member > 0 ? launch::Device::Kind::kCuda : launch::Device::Kind::kCpu, i});
  }
  return Status::OK();
}

Status Controller::CheckStore() {
  // A new run is checked against its source before anything is created; a resumed one
  // against its own store.
  bool exists = fs::exists(config_.run_dir + "/loop.toml");
  std::string store_dir = exists ? config_.run_dir + "/store" : config_.store.source;
  auto snap = store::Snapshot::Open(
      store_dir, exists ? std::nullopt : config_.store.source_generation, store_env_);
  if (!snap.ok()) {
    return snap.status().WithContext(exists ? "the run's store" : config_.path + ": store.source");
  }
  if (!exists && options_.verify_source) {
    Status sound = store::VerifyGeneration(store_dir, (*snap)->generation(), store_env_);
    if (!sound.ok()) {
      return sound.WithContext(fmt::format(
          "{}: store.source generation {} is damaged; the run does not clone it (repair the "
          "store, or pick a sound generation with store.generation)",
          config_.path, (*snap)->generation()));
    }
  }
  COHORT_RETURN_IF_ERROR(CheckConfigAgainstStore(config_, **snap));
  task_ = RunTaskOf(**(*snap)->table(config_.store.train));
  if (!task_.regression) {
    COHORT_ASSIGN_OR_RETURN(classes_, RunClassCount(config_, **snap));
  }
  return Status::OK();
}

Status Controller::OpenRunDirectory() {
  // The crash points count the loop's own commits, not the clone.
  COHORT_ASSIGN_OR_RETURN(run_, OpenRunDir(config_, config_text_, store::Env::Default()));
  if (run_.resumed) {
    display_->Note(fmt::format("resuming run {} in {}", config_.name, run_.paths.root));
    for (const ConfigChange& c : run_.changes) {
      display_->Note(fmt::format("  config change: {}: {} -> {}", c.field, c.before, c.after));
    }
  } else {
    display_->Note(
        fmt::format("run {}: {} members on {} device(s), store cloned from {} "
                    "generation {} into {}",
                    config_.name, config_.members.size(), config_.devices.size(),
                    run_.run.source_store, run_.run.source_generation, run_.paths.store()));
  }
  auto lock = store::Transaction::LockStore(run_.paths.store(), store_env_);
  if (!lock.ok()) {
    if (lock.status().code() != Status::Code::kBusy) return lock.status();
    return Status::Busy(fmt::format(
        "{}: a run keeps its store to itself while it runs; stop the other writer first (or "
        "change a copy made with `cohort data clone`)",
        lock.status().message()));
  }
  store_lock_ = std::move(*lock);
  if (auto note = EmulatedBf16Note(config_, CpuHasBf16Kernels())) {
    display_->Note("warning: " + *note);
  }
  COHORT_RETURN_IF_ERROR(run_.journal->SetRunStatus(run_.run.id, RunStatus::kRunning));
  COHORT_ASSIGN_OR_RETURN(
      auto first,
      store::Snapshot::Open(run_.paths.store(), run_.run.source_generation, store_env_));
  COHORT_ASSIGN_OR_RETURN(const store::Table* train, first->table(config_.store.train));
  starting_labels_ = train->size();
  return Status::OK();
}

Status Controller::StartScheduler() {
  host_ = options_.host;
  launch::SlurmProcessHost* slurm = nullptr;
  if (host_ == nullptr && config_.launcher == Launcher::kSlurm) {
    COHORT_ASSIGN_OR_RETURN(auto slurm_host,
                            launch::SlurmProcessHost::Create(config_.slurm, kKillGrace));
    slurm = slurm_host.get();
    own_host_ = std::move(slurm_host);
    host_ = own_host_.get();
  } else if (host_ == nullptr) {
    COHORT_ASSIGN_OR_RETURN(own_host_, launch::LocalProcessHost::Create(kKillGrace));
    host_ = own_host_.get();
  }
  auto millis = [](double seconds) {
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  };
  SchedulerOptions so;
  so.devices = config_.devices;
  so.threads_per_cpu_device = config_.threads_per_cpu_device;
  so.members_per_device = config_.members_per_device;
  so.cpu_count = cpus_;
  so.member_binary = options_.member_binary;
  so.heartbeat_timeout = millis(config_.failure.heartbeat_timeout_s);
  so.attempt_timeout = millis(config_.failure.attempt_timeout_s);
  so.kill_grace = kKillGrace;
  so.memory_limit_bytes = static_cast<uint64_t>(config_.failure.memory_limit_gb * (1 << 30));
  so.log_limit_bytes = static_cast<uint64_t>(config_.failure.log_limit_mb) << 20;
  progress_ = std::make_unique<DisplayProgress>(display_.get());
  progress_->member_accuracy = [this](const AttemptRef& a) { return MemberTestAccuracy(a); };
  COHORT_ASSIGN_OR_RETURN(scheduler_, Scheduler::Create(so, run_.paths, run_.journal.get(),
                                                        run_.run.id, host_, progress_.get()));
  if (slurm != nullptr) {
    display_->Note(fmt::format("slurm: {} worker step(s), {} each{}", config_.devices.size(),
                               launch::DescribeRequest(config_.slurm),
                               launch::InSlurmAllocation() ? ", inside the allocation" : ""));
    COHORT_RETURN_IF_ERROR(
        slurm->CheckSharedStore(run_.paths.store(), run_.paths.workers() + "/slurm-probe.log"));
  }
  return Status::OK();
}

Status Controller::Prepare() {
  COHORT_RETURN_IF_ERROR(LoadConfig());
  store_env_ = CrashEnv();
  COHORT_RETURN_IF_ERROR(CheckStore());
  display_ = std::make_unique<Display>(options_.out, options_.display);
  COHORT_RETURN_IF_ERROR(OpenRunDirectory());
  return StartScheduler();
}

}  // namespace cohort::loop
