#include "loop/run/crash_point.h"

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

namespace cohort::loop {

namespace {

struct Target {
  std::string point;
  int64_t count = 1;
};

const Target* CrashTarget() {
  static const std::unique_ptr<Target> target = [] {
    const char* text = std::getenv("COHORT_CRASH_AT");
    if (text == nullptr || text[0] == '\0') return std::unique_ptr<Target>();
    auto t = std::make_unique<Target>();
    t->point = text;
    if (auto colon = t->point.find(':'); colon != std::string::npos) {
      t->count = std::max<int64_t>(1, std::strtoll(t->point.c_str() + colon + 1, nullptr, 10));
      t->point.resize(colon);
    }
    return t;
  }();
  return target.get();
}

class CrashingFile : public store::WritableFile {
 public:
  explicit CrashingFile(std::unique_ptr<store::WritableFile> base) : base_(std::move(base)) {}
  Status Append(std::span<const std::byte> data) override {
    MaybeCrash("store");
    return base_->Append(data);
  }
  Status Sync() override {
    MaybeCrash("store");
    return base_->Sync();
  }
  Status Close() override { return base_->Close(); }

 private:
  std::unique_ptr<store::WritableFile> base_;
};

class CrashingEnv : public store::Env {
 public:
  explicit CrashingEnv(store::Env* base) : base_(base) {}
  Result<std::unique_ptr<store::WritableFile>> NewWritableFile(const std::string& path) override {
    MaybeCrash("store");
    auto file = base_->NewWritableFile(path);
    if (!file.ok()) return file.status();
    return std::unique_ptr<store::WritableFile>(new CrashingFile(std::move(*file)));
  }
  Result<std::string> ReadFileToString(const std::string& path) override {
    return base_->ReadFileToString(path);
  }
  Result<std::shared_ptr<const store::MappedFile>> MapReadOnly(const std::string& path) override {
    return base_->MapReadOnly(path);
  }
  bool FileExists(const std::string& path) override { return base_->FileExists(path); }
  Result<uint64_t> FileSize(const std::string& path) override { return base_->FileSize(path); }
  Result<std::vector<std::string>> ListDir(const std::string& dir) override {
    return base_->ListDir(dir);
  }
  Status CreateDir(const std::string& dir) override {
    MaybeCrash("store");
    return base_->CreateDir(dir);
  }
  Status RemoveFile(const std::string& path) override {
    MaybeCrash("store");
    return base_->RemoveFile(path);
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    MaybeCrash("store");
    return base_->RenameFile(from, to);
  }
  Status LinkOrCopyFile(const std::string& from, const std::string& to) override {
    MaybeCrash("store");
    return base_->LinkOrCopyFile(from, to);
  }
  Status SyncDir(const std::string& dir) override {
    MaybeCrash("store");
    return base_->SyncDir(dir);
  }
  Result<std::unique_ptr<store::FileLock>> LockFile(const std::string& path) override {
    return base_->LockFile(path);
  }

 private:
  store::Env* base_;
};

}  // namespace

void MaybeCrash(const char* point) {
  const Target* target = CrashTarget();
  if (target == nullptr || target->point != point) return;
  static std::mutex mu;
  static int64_t passes = 0;
  std::lock_guard<std::mutex> lock(mu);
  if (++passes == target->count) {
    ::raise(SIGKILL);
  }
}

store::Env* CrashEnv() {
  const Target* target = CrashTarget();
  if (target == nullptr || target->point != "store") return store::Env::Default();
  static CrashingEnv env(store::Env::Default());
  return &env;
}

}  // namespace cohort::loop
