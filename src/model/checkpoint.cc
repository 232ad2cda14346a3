#include "model/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "common/file_util.h"

namespace cohort::model {

using nlohmann::json;

std::string FirstLine(const std::string& text) {
  size_t end = text.find('\n');
  std::string line = text.substr(0, end);
  while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
  return line;
}

namespace {

// A write error as a Status; a full disk (or quota) reads "no space left on device writing
// checkpoint PATH", the one line the loop journals for the attempt.
Status WriteError(const std::string& path, int err) {
  if (err == ENOSPC || err == EDQUOT) {
    return Status::IOError("no space left on device writing checkpoint " + path);
  }
  return Status::FromErrno("write checkpoint " + path, err);
}

// libtorch's archive writer, fed through a function: it must never see a short write. On a
// failed write (a full disk) its zip writer throws c10::Error ("unexpected pos"), and throws
// again from its destructor while the first exception unwinds: std::terminate, exit 134.
// So every call reports success, and the first error is kept for SaveCheckpoint to return.
class FdSink {
 public:
  explicit FdSink(int fd) : fd_(fd) {}
  size_t operator()(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    size_t done = 0;
    while (error_ == 0 && done < n) {
      ssize_t w = ::write(fd_, p + done, n - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        error_ = w < 0 ? errno : EIO;
        break;
      }
      done += static_cast<size_t>(w);
    }
    return n;
  }
  int error() const { return error_; }

 private:
  int fd_;
  int error_ = 0;
};

}  // namespace

Status SaveCheckpoint(const std::string& path, const MemberMeta& meta, Network& net,
                      torch::optim::Optimizer* optimizer) {
  // A writer killed mid-write (SIGKILL) left its temp file: gone now.
  RemoveStaleTempFiles(path);
  // A unique temp name: a retried member may write the same path while a stuck attempt
  // still runs, and the two must not interleave.
  const std::string tmp = UniqueTempName(path);
  ScopedFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) return WriteError(path, errno);
  FdSink sink(fd.get());
  Status st = GuardTorch("write checkpoint " + path, [&]() -> Status {
    torch::serialize::OutputArchive archive;
    archive.write("meta", c10::IValue(meta.ToJson().dump()));
    torch::serialize::OutputArchive model_archive;
    net->save(model_archive);
    archive.write("model", model_archive);
    if (optimizer != nullptr) {
      torch::serialize::OutputArchive optimizer_archive;
      optimizer->save(optimizer_archive);
      archive.write("optimizer", optimizer_archive);
    }
    archive.save_to([&sink](const void* data, size_t n) { return sink(data, n); });
    return Status::OK();
  });
  if (st.ok() && sink.error() != 0) st = WriteError(path, sink.error());
  if (st.ok() && ::fsync(fd.get()) != 0) st = WriteError(path, errno);
  if (st.ok() && ::close(fd.release()) != 0) st = WriteError(path, errno);
  if (!st.ok()) {
    std::remove(tmp.c_str());
    return st;
  }
  return PublishFile(tmp, path);
}

Result<LoadedCheckpoint> LoadCheckpoint(const std::string& path, const torch::Device& device) {
  if (::access(path.c_str(), R_OK) != 0) {
    return Status::FromErrno("checkpoint " + path, errno);
  }
  return GuardTorch("read checkpoint " + path, [&]() -> Result<LoadedCheckpoint> {
    torch::serialize::InputArchive archive;
    archive.load_from(path, device);
    c10::IValue meta_value;
    if (!archive.try_read("meta", meta_value) || !meta_value.isString()) {
      return Status::Corruption(path + ": not a cohort checkpoint (no description)");
    }
    json meta_json = json::parse(meta_value.toStringRef(), nullptr, /*allow_exceptions=*/false);
    if (meta_json.is_discarded()) return Status::Corruption(path + ": damaged description");
    LoadedCheckpoint out;
    COHORT_ASSIGN_OR_RETURN(out.meta, MemberMeta::FromJson(meta_json, path));
    COHORT_ASSIGN_OR_RETURN(out.spec, ParseModelSpec(out.meta.model, out.meta.member));
    COHORT_RETURN_IF_ERROR(
        InferShapes(out.spec, out.meta.input_shape, out.meta.outputs, out.meta.member).status());
    out.net = Network(out.spec, out.meta.input_shape, out.meta.outputs, out.meta.standardize);
    torch::serialize::InputArchive model_archive;
    archive.read("model", model_archive);
    out.net->load(model_archive);
    out.net->to(device);
    return out;
  });
}

Status LoadOptimizerState(const std::string& path, const torch::Device& device,
                          torch::optim::Optimizer& optimizer) {
  return GuardTorch("read optimizer state from " + path, [&]() -> Status {
    torch::serialize::InputArchive archive;
    archive.load_from(path, device);
    torch::serialize::InputArchive optimizer_archive;
    if (!archive.try_read("optimizer", optimizer_archive)) {
      return Status::InvalidArgument(path + " holds no optimizer state");
    }
    optimizer.load(optimizer_archive);
    return Status::OK();
  });
}

Result<torch::Device> ParseDevice(const std::string& text) {
  if (text == "cpu" || text.rfind("cpu:", 0) == 0) return torch::Device(torch::kCPU);
  if (text == "cuda" || text.rfind("cuda:", 0) == 0) {
    int64_t index = 0;
    if (text.size() > 5) {
      const std::string digits = text.substr(5);
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos ||
          digits.size() > 4) {
        return Status::InvalidArgument("device '" + text + "': expected cuda:N");
      }
      index = std::stoll(digits);
    }
    if (!torch::cuda::is_available()) {
      return Status::InvalidArgument("device '" + text +
                                     "': this libtorch build has no CUDA, or no GPU is visible");
    }
    if (index >= static_cast<int64_t>(torch::cuda::device_count())) {
      return Status::InvalidArgument("device '" + text + "': only " +
                                     std::to_string(torch::cuda::device_count()) +
                                     " CUDA device(s) visible");
    }
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  return Status::InvalidArgument("device '" + text + "': expected cpu, cuda or cuda:N");
}

}  // namespace cohort::model
