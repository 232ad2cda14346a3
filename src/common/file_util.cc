#include "common/file_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>

namespace cohort {

namespace {

Status SyncFile(const std::string& path) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno("open " + path, errno);
  if (::fsync(fd.get()) != 0) return Status::FromErrno("fsync " + path, errno);
  return Status::OK();
}

// The steps every durable write ends with, once `tmp` holds the synced new content.
Status RenameIntoPlace(const std::string& tmp, const std::string& path) {
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = Status::FromErrno("rename " + tmp + " to " + path, errno);
    ::unlink(tmp.c_str());
    return s;
  }
  return SyncDir(ParentDir(path));
}

}  // namespace

void ScopedFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Status ScopedFd::Close(const std::string& path) {
  // No retry on EINTR: Linux has closed the descriptor anyway, and it may be reused by now.
  int fd = release();
  if (fd >= 0 && ::close(fd) != 0) return Status::FromErrno("close " + path, errno);
  return Status::OK();
}

Status WriteAll(int fd, std::span<const std::byte> data, const std::string& path) {
  while (!data.empty()) {
    ssize_t w = ::write(fd, data.data(), data.size());
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("write " + path, errno);
    }
    data = data.subspan(static_cast<size_t>(w));
  }
  return Status::OK();
}

std::string LastNonEmptyLine(const std::string& path) {
  constexpr off_t kTail = 64 << 10;
  constexpr size_t kMaxChars = 300;
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return "";
  off_t size = ::lseek(fd.get(), 0, SEEK_END);
  if (size <= 0) return "";
  off_t start = size > kTail ? size - kTail : 0;
  std::string text(static_cast<size_t>(size - start), '\0');
  ssize_t r = ::pread(fd.get(), text.data(), text.size(), start);
  if (r <= 0) return "";
  text.resize(static_cast<size_t>(r));
  size_t end = text.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return "";
  size_t begin = text.rfind('\n', end);
  begin = begin == std::string::npos ? 0 : begin + 1;
  std::string line = text.substr(begin, end + 1 - begin);
  if (line.size() > kMaxChars) line = line.substr(0, kMaxChars) + "...";
  return line;
}

Result<std::string> ReadFileToString(const std::string& path) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno("open " + path, errno);
  std::string out;
  struct stat st {};
  if (::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode)) {
    out.reserve(static_cast<size_t>(st.st_size));
  }
  char buf[1 << 16];
  while (true) {
    ssize_t r = ::read(fd.get(), buf, sizeof(buf));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("read " + path, errno);
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  return out;
}

std::string ParentDir(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

Status SyncDir(const std::string& dir) {
  ScopedFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno("open directory " + dir, errno);
  if (::fsync(fd.get()) != 0) return Status::FromErrno("fsync directory " + dir, errno);
  return Status::OK();
}

Status WriteFileAtomically(const std::string& path,
                           std::initializer_list<std::span<const std::byte>> parts) {
  const std::string tmp = path + ".tmp";
  ScopedFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return Status::FromErrno("open " + tmp, errno);
  Status s;
  for (std::span<const std::byte> part : parts) {
    if (s.ok()) s = WriteAll(fd.get(), part, tmp);
  }
  if (s.ok() && ::fsync(fd.get()) != 0) s = Status::FromErrno("fsync " + tmp, errno);
  if (s.ok()) s = fd.Close(tmp);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  return RenameIntoPlace(tmp, path);
}

Status PublishFile(const std::string& tmp, const std::string& path) {
  if (Status s = SyncFile(tmp); !s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  return RenameIntoPlace(tmp, path);
}

namespace {

// This host's name as temp file names carry it ('/' would make it a path).
std::string ThisHost() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  std::string host(buf);
  for (char& c : host) {
    if (c == '/') c = '_';
  }
  return host;
}

}  // namespace

std::string UniqueTempName(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + ThisHost() + "." + std::to_string(::getpid()) + "." +
         std::to_string(counter.fetch_add(1));
}

int RemoveStaleTempFiles(const std::string& path) {
  const std::filesystem::path target(path);
  const std::string prefix = target.filename().string() + ".tmp.";
  const std::string host = ThisHost();
  const std::filesystem::path dir = target.parent_path().empty() ? "." : target.parent_path();
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    // HOST.PID.N (a host name may hold dots), or PID.N.
    const std::string rest = name.substr(prefix.size());
    const size_t last = rest.rfind('.');
    if (last == std::string::npos || last == 0) continue;
    const size_t before = rest.rfind('.', last - 1);
    const std::string pid_text = before == std::string::npos
                                     ? rest.substr(0, last)
                                     : rest.substr(before + 1, last - before - 1);
    const std::string writer_host = before == std::string::npos ? host : rest.substr(0, before);
    if (writer_host != host || pid_text.empty() || pid_text.size() > 9 ||
        pid_text.find_first_not_of("0123456789") != std::string::npos) {
      continue;  // another host's writer may still run: its file is not ours to judge
    }
    const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) {
      std::error_code remove_ec;
      if (std::filesystem::remove(entry.path(), remove_ec)) removed++;
    }
  }
  return removed;
}

}  // namespace cohort
