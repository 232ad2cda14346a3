#include "loop/run/run_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "common/file_util.h"
#include "store/store.h"

namespace cohort::loop {

namespace {

namespace fs = std::filesystem;

// Names a run directory may hold; anything else means it is not (only) a run's.
bool IsRunFile(const std::string& name) {
  return name == "loop.toml" || name == "loop.toml.tmp" || name == "lock" || name == "store" ||
         name == "store.partial" || name == "run.db" || name == "run.db-wal" ||
         name == "run.db-shm" || name == "run.db-journal" || name == "members" ||
         name == "workers" || name == "oracle" || name == "updates";
}

Status CheckRunDirContents(const std::string& root) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    std::string name = entry.path().filename().string();
    if (!IsRunFile(name)) {
      return Status::InvalidArgument("run directory " + root + " holds '" + name +
                                     "', which is not part of a cohort run; choose an empty or "
                                     "new run_dir");
    }
  }
  if (ec) return Status::IOError("list " + root + ": " + ec.message());
  return Status::OK();
}

Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError("create directory " + dir + ": " + ec.message());
  return Status::OK();
}

// Clones the source into RUN_DIR/store through store.partial, so `store` exists only whole.
Status CloneSourceStore(const LoopConfig& config, const RunPaths& paths, store::Env* env) {
  std::string partial = paths.root + "/store.partial";
  std::error_code ec;
  fs::remove_all(partial, ec);  // a clone an earlier start did not finish
  if (ec) return Status::IOError("remove " + partial + ": " + ec.message());
  auto cloned =
      store::CloneStore(config.store.source, partial, config.store.source_generation, env);
  if (!cloned.ok()) {
    return cloned.status().WithContext("cannot clone the source store " + config.store.source +
                                       " into the run");
  }
  COHORT_RETURN_IF_ERROR(env->RenameFile(partial, paths.store()));
  return env->SyncDir(paths.root);
}

}  // namespace

std::string RunPaths::AttemptDir(const std::string& member, int64_t round, int attempt) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "/round-%04lld/attempt-%d", static_cast<long long>(round),
                attempt);
  return "members/" + member + buf;
}

std::string RunPaths::WorkerLog(const std::string& device, int slot, int number) {
  std::string name = device;
  std::replace(name.begin(), name.end(), ':', '-');
  char buf[64];
  std::snprintf(buf, sizeof(buf), "-%d-%04d.log", slot, number);
  return "workers/" + name + buf;
}

std::string RunPaths::OracleDir(int64_t round) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "oracle/round-%04lld", static_cast<long long>(round));
  return buf;
}

std::string RunPaths::UpdateStepDir(int64_t round, size_t step) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "updates/round-%04lld/step-%zu", static_cast<long long>(round),
                step);
  return buf;
}

Result<OpenRun> OpenRunDir(const LoopConfig& config, const std::string& config_text,
                           store::Env* env) {
  OpenRun open;
  open.paths.root = config.run_dir;
  const RunPaths& paths = open.paths;
  std::error_code ec;
  if (fs::exists(paths.root, ec)) {
    if (!fs::is_directory(paths.root, ec)) {
      return Status::InvalidArgument("run directory " + paths.root +
                                     " exists and is not a directory");
    }
    COHORT_RETURN_IF_ERROR(CheckRunDirContents(paths.root));
  }
  COHORT_RETURN_IF_ERROR(MakeDirs(paths.root));

  auto lock = env->LockFile(paths.lock());
  if (!lock.ok()) {
    if (lock.status().code() == Status::Code::kBusy) {
      return Status::Busy("run " + config.name + " is already running: " + lock.status().message());
    }
    return lock.status();
  }
  open.lock = std::move(*lock);

  bool has_config = env->FileExists(paths.config());
  if (has_config) {
    // A resume: the config may only change where that is safe.
    COHORT_ASSIGN_OR_RETURN(std::string old_text, env->ReadFileToString(paths.config()));
    std::string base_dir = fs::path(config.path).parent_path().string();
    if (base_dir.empty()) base_dir = ".";
    auto old_config = ParseLoopConfig(old_text, paths.config(), base_dir);
    if (!old_config.ok()) {
      return Status::Corruption("the run's own config is unreadable: " +
                                old_config.status().message());
    }
    // The run directory is where this config points, whatever the old one said.
    old_config->run_dir = config.run_dir;
    Status compatible = CheckResumeCompatible(*old_config, config);
    if (!compatible.ok()) {
      return Status::InvalidArgument(config.path + ": cannot resume run " + config.name + " in " +
                                     paths.root + ": " + compatible.message());
    }
    open.changes = DiffLoopConfigs(*old_config, config);
  }

  if (!env->FileExists(paths.store())) {
    if (has_config) {
      return Status::Corruption("run directory " + paths.root + " has a config but no store/");
    }
    COHORT_RETURN_IF_ERROR(CloneSourceStore(config, paths, env));
  }

  COHORT_ASSIGN_OR_RETURN(open.journal, Journal::Open(paths.journal()));
  auto found = open.journal->FindRun(config.name);
  if (found.ok()) {
    open.run = *found;
    open.resumed = has_config;
  } else if (found.status().code() == Status::Code::kNotFound) {
    if (has_config) {
      return Status::Corruption("run directory " + paths.root + " has a config but its journal " +
                                paths.journal() + " has no run " + config.name);
    }
    COHORT_ASSIGN_OR_RETURN(auto history, store::ReadHistory(paths.store(), env));
    if (history.empty()) return Status::Corruption(paths.store() + ": no committed generation");
    RunStart start;
    start.name = config.name;
    start.config_toml = config_text;
    start.config_fingerprint = LoopConfigFingerprint(config);
    start.source_store = config.store.source;
    start.source_generation = history.front().generation;
    COHORT_RETURN_IF_ERROR(open.journal->StartRun(start).status());
    COHORT_ASSIGN_OR_RETURN(open.run, open.journal->FindRun(config.name));
  } else {
    return found.status();
  }
  if (!has_config) {
    COHORT_RETURN_IF_ERROR(WriteFileAtomically(env, paths.config(), open.run.config_toml));
  }
  return open;
}

std::optional<int64_t> RunLockHolder(const std::string& run_dir) {
  std::string path = run_dir + "/lock";
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  struct flock f {};
  f.l_type = F_WRLCK;
  f.l_whence = SEEK_SET;
  int rc = ::fcntl(fd.get(), F_OFD_GETLK, &f);
  if (rc != 0 && errno == EINVAL) rc = ::fcntl(fd.get(), F_GETLK, &f);
  if (rc != 0 || f.l_type == F_UNLCK) return std::nullopt;
  char buf[32] = {};
  ssize_t n = ::pread(fd.get(), buf, sizeof(buf) - 1, 0);
  return n > 0 ? std::atoll(buf) : -1;
}

}  // namespace cohort::loop
