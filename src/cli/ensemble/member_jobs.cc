#include "cli/ensemble/member_jobs.h"

#include <deque>
#include <fstream>
#include <map>

namespace cohort::cli {

namespace {

class Runner : public launch::SubprocessSet::Handler {
 public:
  void OnEvent(launch::Subprocess&, nlohmann::json) override {}
  void OnLog(launch::Subprocess&, std::string_view) override {}
  void OnExit(launch::Subprocess& child, const launch::ExitInfo& info) override {
    auto it = running_.find(&child);
    if (it == running_.end()) return;
    if (!(info.reason == launch::ExitReason::kExited && info.exit_code == 0) && error_.ok()) {
      std::string last = LastErrorLine(it->second.spec.stderr_path);
      error_ = Status::Aborted(it->second.what + ": " + (last.empty() ? info.ToString() : last));
    }
    running_.erase(it);
  }

  std::map<const launch::Subprocess*, MemberJob> running_;
  Status error_;
};

}  // namespace

std::string LastErrorLine(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  const std::string prefix = "cohort: error: ";
  if (last.rfind(prefix, 0) == 0) last = last.substr(prefix.size());
  return last;
}

Status RunMemberJobs(std::vector<MemberJob> jobs, size_t slots) {
  COHORT_ASSIGN_OR_RETURN(auto set, launch::SubprocessSet::Create());
  Runner runner;
  std::deque<MemberJob> queue(std::make_move_iterator(jobs.begin()),
                              std::make_move_iterator(jobs.end()));
  while (!queue.empty() || !set->empty()) {
    while (!queue.empty() && set->size() < std::max<size_t>(slots, 1) && runner.error_.ok()) {
      MemberJob job = std::move(queue.front());
      queue.pop_front();
      COHORT_ASSIGN_OR_RETURN(launch::Subprocess * child, set->Spawn(job.spec));
      runner.running_[child] = std::move(job);
    }
    if (set->empty()) break;
    COHORT_ASSIGN_OR_RETURN(auto polled, set->Poll(std::chrono::milliseconds(-1), runner));
    if (polled.interrupts > 0) return Status::Aborted("interrupted");
  }
  return runner.error_;
}

}  // namespace cohort::cli
