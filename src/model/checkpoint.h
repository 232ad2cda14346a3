// Checkpoints of a member (internal to src/model): the network's weights and buffers, the
// optimizer's state, and a JSON description (spec, task, shapes, training summary), in one
// libtorch archive written to a temp file, fsync'd and renamed into place.
//
// Thread-safety: free functions; one caller per path.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "model/network.h"
#include "model/spec.h"
#include "model/task.h"

namespace cohort::model {

// Writes PATH.tmp.HOST.PID.N (UniqueTempName), fsyncs it and renames it over `path`. Any
// failure removes the temp file and returns one line; a full disk reads "no space left on
// device writing checkpoint PATH". Temp files of `path` whose writer on this host is dead
// are removed first (RemoveStaleTempFiles, common/file_util.h).
Status SaveCheckpoint(const std::string& path, const MemberMeta& meta, Network& net,
                      torch::optim::Optimizer* optimizer);

struct LoadedCheckpoint {
  MemberMeta meta;
  ModelSpec spec;
  Network net{nullptr};
};
// Loads the meta and the network onto `device`; also the optimizer state if given one built
// over that network's parameters (warm start; see LoadOptimizerState).
Result<LoadedCheckpoint> LoadCheckpoint(const std::string& path, const torch::Device& device);
// The optimizer's tensors are mapped onto `device` (a checkpoint written on a GPU warm-starts
// on a CPU and the other way round).
Status LoadOptimizerState(const std::string& path, const torch::Device& device,
                          torch::optim::Optimizer& optimizer);

// Parses "cpu", "cuda", "cuda:N"; errors if CUDA is asked for but unavailable.
Result<torch::Device> ParseDevice(const std::string& text);

// The first line of an exception message (libtorch adds source locations on later lines).
std::string FirstLine(const std::string& text);

// Runs `fn`, turning libtorch and standard exceptions into a one-line Status with `context`:
// exceptions never cross the model part's boundary.
template <typename Fn>
auto GuardTorch(const std::string& context, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const c10::Error& e) {
    return Status::InvalidArgument(context + ": " + FirstLine(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return Status::InvalidArgument(context + ": " + FirstLine(e.what()));
  }
}

}  // namespace cohort::model
