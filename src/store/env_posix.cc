// The POSIX Env: plain open/write/fsync/rename with O_CLOEXEC on every descriptor.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>

#include "common/file_util.h"
#include "store/env.h"

namespace cohort::store {

namespace {

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, ScopedFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  Status Append(std::span<const std::byte> data) override {
    return WriteAll(fd_.get(), data, path_);
  }
  Status Sync() override {
    if (::fdatasync(fd_.get()) != 0) return Status::FromErrno("fsync " + path_, errno);
    return Status::OK();
  }
  Status Close() override { return fd_.Close(path_); }

 private:
  std::string path_;
  ScopedFd fd_;
};

class PosixMappedFile final : public MappedFile {
 public:
  PosixMappedFile(std::string path, void* addr, size_t size)
      : path_(std::move(path)), addr_(addr), size_(size) {}
  ~PosixMappedFile() override {
    if (addr_ != nullptr) ::munmap(addr_, size_);
  }
  const std::byte* data() const override {
    static const std::byte kEmpty{};
    return addr_ != nullptr ? static_cast<const std::byte*>(addr_) : &kEmpty;
  }
  size_t size() const override { return size_; }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  void* addr_;
  size_t size_;
};

// Inodes this process holds a writer lock on, as LevelDB keeps a table of locked files.
class LockTable {
 public:
  bool Insert(const std::string& path) {
    std::lock_guard<std::mutex> guard(mu_);
    return paths_.insert(path).second;
  }
  void Remove(const std::string& path) {
    std::lock_guard<std::mutex> guard(mu_);
    paths_.erase(path);
  }

 private:
  std::mutex mu_;
  std::set<std::string> paths_;
};

LockTable& Locks() {
  static auto* table = new LockTable();
  return *table;
}

class PosixFileLock final : public FileLock {
 public:
  PosixFileLock(std::string key, ScopedFd fd) : key_(std::move(key)), fd_(std::move(fd)) {}
  ~PosixFileLock() override {
    fd_.reset();  // releases the lock (both kinds: this was the only descriptor)
    Locks().Remove(key_);
  }

 private:
  std::string key_;
  ScopedFd fd_;
};

class PosixEnv final : public Env {
 public:
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    ScopedFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid()) return Status::FromErrno("create " + path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, std::move(fd)));
  }

  Result<std::string> ReadFileToString(const std::string& path) override {
    return cohort::ReadFileToString(path);
  }

  Result<std::shared_ptr<const MappedFile>> MapReadOnly(const std::string& path) override {
    ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return Status::FromErrno("open " + path, errno);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return Status::FromErrno("stat " + path, errno);
    size_t size = static_cast<size_t>(st.st_size);
    void* addr = nullptr;
    if (size > 0) {
      addr = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
      if (addr == MAP_FAILED) return Status::FromErrno("mmap " + path, errno);
    }
    // Closing the descriptor on return is fine: the mapping keeps the file alive.
    return std::shared_ptr<const MappedFile>(new PosixMappedFile(path, addr, size));
  }

  bool FileExists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }

  Result<uint64_t> FileSize(const std::string& path) override {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return Status::FromErrno("stat " + path, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  Result<std::vector<std::string>> ListDir(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return Status::FromErrno("list " + dir, errno);
    std::vector<std::string> names;
    while (struct dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(std::move(name));
    }
    ::closedir(d);
    return names;
  }

  Status CreateDir(const std::string& dir) override {
    if (::mkdir(dir.c_str(), 0755) != 0) {
      if (errno == EEXIST) return Status::AlreadyExists(dir + " already exists");
      return Status::FromErrno("mkdir " + dir, errno);
    }
    return Status::OK();
  }

  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return Status::FromErrno("remove " + path, errno);
    return Status::OK();
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return Status::FromErrno("rename " + from + " to " + to, errno);
    }
    return Status::OK();
  }

  Status LinkOrCopyFile(const std::string& from, const std::string& to) override {
    if (::link(from.c_str(), to.c_str()) == 0) return Status::OK();
    if (errno != EXDEV && errno != EPERM && errno != EMLINK && errno != ENOTSUP) {
      return Status::FromErrno("link " + from + " to " + to, errno);
    }
    COHORT_ASSIGN_OR_RETURN(auto src, MapReadOnly(from));
    COHORT_ASSIGN_OR_RETURN(auto dst, NewWritableFile(to));
    COHORT_RETURN_IF_ERROR(dst->Append(std::span<const std::byte>(src->data(), src->size())));
    COHORT_RETURN_IF_ERROR(dst->Sync());
    return dst->Close();
  }

  Status SyncDir(const std::string& dir) override { return cohort::SyncDir(dir); }

  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    ScopedFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!fd.valid()) return Status::FromErrno("open lock file " + path, errno);
    // Open-file-description locks belong to this open file, not to the process, so a second
    // lock from this process through another spelling of the path conflicts too; the table
    // keyed by inode covers kernels without them.
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return Status::FromErrno("stat " + path, errno);
    std::string key = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
    if (!Locks().Insert(key)) {
      return Status::Busy(path + " is held by another writer in this process");
    }
    struct flock f {};
    f.l_type = F_WRLCK;
    f.l_whence = SEEK_SET;
    int rc = ::fcntl(fd.get(), F_OFD_SETLK, &f);
    if (rc != 0 && errno == EINVAL) rc = ::fcntl(fd.get(), F_SETLK, &f);
    if (rc != 0) {
      int err = errno;
      char buf[32] = {};
      ssize_t n = ::pread(fd.get(), buf, sizeof(buf) - 1, 0);
      std::string holder = n > 0 ? std::string(" (pid ") + std::string(buf, n) + ")" : "";
      fd.reset();
      Locks().Remove(key);
      if (err == EACCES || err == EAGAIN) {
        return Status::Busy(path + " is held by another writer" + holder);
      }
      return Status::FromErrno("lock " + path, err);
    }
    // Record the holder for the message a second writer gets; advisory only.
    std::string pid = std::to_string(::getpid());
    if (::ftruncate(fd.get(), 0) == 0) (void)!::pwrite(fd.get(), pid.data(), pid.size(), 0);
    return std::unique_ptr<FileLock>(new PosixFileLock(key, std::move(fd)));
  }
};

}  // namespace

Env* Env::Default() {
  static auto* env = new PosixEnv();
  return env;
}

}  // namespace cohort::store
