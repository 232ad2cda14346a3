#include "store/fault_env.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "common/file_util.h"

namespace cohort::store {

namespace fs = std::filesystem;

namespace {

// One spelling per path, so "dir/x" and "dir//x" or "dir/./x" share their model.
std::string Normalize(const std::string& path) {
  std::string out = fs::path(path).lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out.empty() ? "." : out;
}

Status FromErrorCode(const std::string& what, const std::error_code& ec) {
  return Status::IOError(what + ": " + ec.message());
}

}  // namespace

const char* FaultOpName(FaultOp op) {
  switch (op) {
    case FaultOp::kNewWritableFile:
      return "NewWritableFile";
    case FaultOp::kAppend:
      return "Append";
    case FaultOp::kSync:
      return "Sync";
    case FaultOp::kClose:
      return "Close";
    case FaultOp::kRenameFile:
      return "RenameFile";
    case FaultOp::kRemoveFile:
      return "RemoveFile";
    case FaultOp::kSyncDir:
      return "SyncDir";
    case FaultOp::kLinkOrCopyFile:
      return "LinkOrCopyFile";
    case FaultOp::kCreateDir:
      return "CreateDir";
  }
  return "?";
}

namespace {
std::string LastComponent(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}
}  // namespace

std::string FaultSite::base_name() const { return LastComponent(path); }

std::string FaultSite::target_base_name() const { return LastComponent(target); }

// A WritableFile whose every call is a step of its env and updates the file's model.
class FaultInjectionEnv::TrackedFile final : public WritableFile {
 public:
  TrackedFile(FaultInjectionEnv* env, std::string path, std::unique_ptr<WritableFile> base,
              std::shared_ptr<FileState> state)
      : env_(env), path_(std::move(path)), base_(std::move(base)), state_(std::move(state)) {}

  Status Append(std::span<const std::byte> data) override { return env_->AppendTo(this, data); }
  Status Sync() override { return env_->SyncFile(this); }
  Status Close() override { return env_->CloseFile(this); }

 private:
  friend class FaultInjectionEnv;
  FaultInjectionEnv* env_;
  std::string path_;
  std::unique_ptr<WritableFile> base_;
  std::shared_ptr<FileState> state_;
};

FaultInjectionEnv::FaultInjectionEnv(Env* base) : base_(base) {}

FaultInjectionEnv::~FaultInjectionEnv() = default;

void FaultInjectionEnv::SetCrashAfter(uint64_t steps) {
  std::lock_guard<std::mutex> guard(mu_);
  crash_at_step_ = steps_ + steps;
  crashed_ = false;
}

void FaultInjectionEnv::ClearCrash() {
  std::lock_guard<std::mutex> guard(mu_);
  crash_at_step_.reset();
  crashed_ = false;
}

bool FaultInjectionEnv::crashed() const {
  std::lock_guard<std::mutex> guard(mu_);
  return crashed_;
}

uint64_t FaultInjectionEnv::steps() const {
  std::lock_guard<std::mutex> guard(mu_);
  return steps_;
}

void FaultInjectionEnv::SetIOErrorPredicate(FaultPredicate predicate) {
  std::lock_guard<std::mutex> guard(mu_);
  io_error_predicate_ = std::move(predicate);
}

void FaultInjectionEnv::FailSyncOn(const std::string& base_name) {
  SetIOErrorPredicate([base_name](const FaultSite& site) {
    return site.op == FaultOp::kSync && site.base_name() == base_name;
  });
}

void FaultInjectionEnv::ClearIOErrors() { SetIOErrorPredicate(nullptr); }

uint64_t FaultInjectionEnv::injected_io_errors() const {
  std::lock_guard<std::mutex> guard(mu_);
  return injected_io_errors_;
}

void FaultInjectionEnv::set_real_sync(bool real_sync) {
  std::lock_guard<std::mutex> guard(mu_);
  real_sync_ = real_sync;
}

Status FaultInjectionEnv::BeginStepLocked(const FaultSite& site) {
  std::string what = std::string(FaultOpName(site.op)) + " " + site.path +
                     (site.target.empty() ? "" : " -> " + site.target);
  if (crash_at_step_ && steps_ >= *crash_at_step_) {
    crashed_ = true;
    return Status::Aborted("injected crash (refused step " + std::to_string(steps_ + 1) + ": " +
                           what + ")");
  }
  steps_++;
  if (io_error_predicate_ && io_error_predicate_(site)) {
    injected_io_errors_++;
    return Status::IOError("injected I/O error: " + what);
  }
  return Status::OK();
}

void FaultInjectionEnv::NoteCreatedLocked(const std::string& path) {
  std::string normalized = Normalize(path);
  created_[ParentDir(normalized)].insert(normalized);
}

Result<std::unique_ptr<WritableFile>> FaultInjectionEnv::NewWritableFile(const std::string& path) {
  std::lock_guard<std::mutex> guard(mu_);
  COHORT_RETURN_IF_ERROR(BeginStepLocked({FaultOp::kNewWritableFile, path, ""}));
  const bool existed = base_->FileExists(path);
  COHORT_ASSIGN_OR_RETURN(auto file, base_->NewWritableFile(path));
  if (!existed) NoteCreatedLocked(path);
  auto state = std::make_shared<FileState>();
  files_[Normalize(path)] = state;
  return std::unique_ptr<WritableFile>(
      new TrackedFile(this, path, std::move(file), std::move(state)));
}

Status FaultInjectionEnv::AppendTo(TrackedFile* file, std::span<const std::byte> data) {
  std::lock_guard<std::mutex> guard(mu_);
  COHORT_RETURN_IF_ERROR(BeginStepLocked({FaultOp::kAppend, file->path_, ""}));
  COHORT_RETURN_IF_ERROR(file->base_->Append(data));
  file->state_->size += data.size();
  return Status::OK();
}

Status FaultInjectionEnv::SyncFile(TrackedFile* file) {
  std::lock_guard<std::mutex> guard(mu_);
  COHORT_RETURN_IF_ERROR(BeginStepLocked({FaultOp::kSync, file->path_, ""}));
  if (real_sync_) COHORT_RETURN_IF_ERROR(file->base_->Sync());
  file->state_->synced_size = file->state_->size;
  return Status::OK();
}

Status FaultInjectionEnv::CloseFile(TrackedFile* file) {
  std::lock_guard<std::mutex> guard(mu_);
  COHORT_RETURN_IF_ERROR(BeginStepLocked({FaultOp::kClose, file->path_, ""}));
  return file->base_->Close();
}

Result<std::string> FaultInjectionEnv::ReadFileToString(const std::string& path) {
  return base_->ReadFileToString(path);
}

Result<std::shared_ptr<const MappedFile>> FaultInjectionEnv::MapReadOnly(const std::string& path) {
  return base_->MapReadOnly(path);
}

bool FaultInjectionEnv::FileExists(const std::string& path) { return base_->FileExists(path); }

Result<uint64_t> FaultInjectionEnv::FileSize(const std::string& path) {
  return base_->FileSize(path);
}

Result<std::vector<std::string>> FaultInjectionEnv::ListDir(const std::string& dir) {
  return base_->ListDir(dir);
}

Result<std::unique_ptr<FileLock>> FaultInjectionEnv::LockFile(const std::string& path) {
  return base_->LockFile(path);
}

Status FaultInjectionEnv::CreateDir(const std::string& dir) {
  std::lock_guard<std::mutex> guard(mu_);
  COHORT_RETURN_IF_ERROR(BeginStepLocked({FaultOp::kCreateDir, dir, ""}));
  COHORT_RETURN_IF_ERROR(base_->CreateDir(dir));
  NoteCreatedLocked(dir);
  return Status::OK();
}

Status FaultInjectionEnv::RemoveFile(const std::string& path) {
  std::lock_guard<std::mutex> guard(mu_);
  COHORT_RETURN_IF_ERROR(BeginStepLocked({FaultOp::kRemoveFile, path, ""}));
  COHORT_RETURN_IF_ERROR(base_->RemoveFile(path));
  std::string normalized = Normalize(path);
  files_.erase(normalized);
  auto dir = created_.find(ParentDir(normalized));
  if (dir != created_.end()) dir->second.erase(normalized);
  return Status::OK();
}

Status FaultInjectionEnv::RenameFile(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> guard(mu_);
  COHORT_RETURN_IF_ERROR(BeginStepLocked({FaultOp::kRenameFile, from, to}));
  PendingRename rename;
  rename.from = Normalize(from);
  rename.to = Normalize(to);
  if (base_->FileExists(to)) {
    COHORT_ASSIGN_OR_RETURN(rename.previous_target, base_->ReadFileToString(to));
    auto tracked = files_.find(rename.to);
    if (tracked != files_.end()) rename.previous_target_state = tracked->second;
  }
  COHORT_RETURN_IF_ERROR(base_->RenameFile(from, to));
  auto moved = files_.find(rename.from);
  if (moved != files_.end()) {
    files_[rename.to] = moved->second;
    files_.erase(moved);
  } else {
    files_.erase(rename.to);  // now holds a file the env did not write: durable contents
  }
  renames_.push_back(std::move(rename));
  return Status::OK();
}

Status FaultInjectionEnv::LinkOrCopyFile(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> guard(mu_);
  COHORT_RETURN_IF_ERROR(BeginStepLocked({FaultOp::kLinkOrCopyFile, from, to}));
  COHORT_RETURN_IF_ERROR(base_->LinkOrCopyFile(from, to));
  NoteCreatedLocked(to);
  return Status::OK();
}

Status FaultInjectionEnv::SyncDir(const std::string& dir) {
  std::lock_guard<std::mutex> guard(mu_);
  COHORT_RETURN_IF_ERROR(BeginStepLocked({FaultOp::kSyncDir, dir, ""}));
  if (real_sync_) {
    COHORT_RETURN_IF_ERROR(base_->SyncDir(dir));
  } else if (!base_->FileExists(dir)) {
    return Status::IOError("fsync directory " + dir + ": no such directory");
  }
  std::string normalized = Normalize(dir);
  created_.erase(normalized);
  std::erase_if(renames_, [&](const PendingRename& r) { return ParentDir(r.to) == normalized; });
  return Status::OK();
}

Status FaultInjectionEnv::DropUnsyncedData() {
  std::lock_guard<std::mutex> guard(mu_);
  Status first_error;
  auto note = [&](Status st) {
    if (first_error.ok() && !st.ok()) first_error = std::move(st);
  };

  // Undo renames, newest first: the file goes back to its source name and the target gets
  // its old contents back (or disappears, having not existed).
  for (auto it = renames_.rbegin(); it != renames_.rend(); ++it) {
    std::error_code ec;
    if (fs::exists(it->to, ec)) {
      fs::rename(it->to, it->from, ec);
      if (ec) note(FromErrorCode("undo rename " + it->from + " -> " + it->to, ec));
      auto moved = files_.find(it->to);
      if (moved != files_.end()) {
        files_[it->from] = moved->second;
        files_.erase(moved);
      } else {
        files_.erase(it->from);
      }
    }
    if (it->previous_target) {
      auto restored = base_->NewWritableFile(it->to);
      if (!restored.ok()) {
        note(restored.status());
        continue;
      }
      note((*restored)->Append(*it->previous_target));
      note((*restored)->Close());
      if (it->previous_target_state) {
        files_[it->to] = it->previous_target_state;
      } else {
        files_.erase(it->to);
      }
    }
  }

  // Cut every file written through the env back to what Sync() made durable.
  for (const auto& [path, state] : files_) {
    std::error_code ec;
    if (!fs::exists(path, ec)) continue;
    uint64_t size = fs::file_size(path, ec);
    if (ec) {
      note(FromErrorCode("size of " + path, ec));
      continue;
    }
    if (size > state->synced_size) {
      fs::resize_file(path, state->synced_size, ec);
      if (ec) note(FromErrorCode("truncate " + path, ec));
    }
  }

  // Entries whose directory was never synced after they were made are gone.
  for (const auto& [dir, entries] : created_) {
    for (const auto& entry : entries) {
      std::error_code ec;
      fs::remove_all(entry, ec);
      if (ec) note(FromErrorCode("remove " + entry, ec));
    }
  }

  files_.clear();
  created_.clear();
  renames_.clear();
  steps_ = 0;
  crash_at_step_.reset();
  crashed_ = false;
  return first_error;
}

}  // namespace cohort::store
