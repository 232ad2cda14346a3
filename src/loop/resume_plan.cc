#include "loop/resume_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "common/json_text.h"

namespace cohort::loop {

namespace {
using nlohmann::json;
}  // namespace

Result<ResumePoint> PlanResume(const std::vector<RoundRecord>& rounds, uint64_t current,
                               const std::string& store_path, const std::string& journal_path,
                               uint64_t commits_per_round) {
  ResumePoint p;
  p.generation = current;
  if (rounds.empty()) return p;
  const RoundRecord& last = rounds.back();
  p.last = last;
  bool done = last.status == RoundStatus::kDone;
  if (done && last.output_generation.value_or(last.input_generation) == last.input_generation) {
    p.round = last.round;
    p.generation = last.input_generation;
    p.reconsider = true;
  } else if (done) {
    p.round = last.round + 1;
    p.generation = *last.output_generation;
  } else {
    p.round = last.round;
    p.generation = last.input_generation;
  }
  // An unfinished round may have committed already: CURRENT is then one past its input (or,
  // with several update steps, up to one past per step; the steps recognise their commits).
  bool committed_unfinished =
      !done && current > p.generation && current <= p.generation + commits_per_round;
  if (current != p.generation && !committed_unfinished) {
    return Status::Corruption(
        fmt::format("{}: CURRENT is generation {}, but the journal {} expects generation {}; the "
                    "store was changed outside the run",
                    store_path, current, journal_path, p.generation));
  }
  return p;
}

std::vector<MemberResult> ResultsFromAttempts(const LoopConfig& config,
                                              const std::vector<AttemptRecord>& attempts) {
  std::vector<MemberResult> results(config.members.size());
  for (const AttemptRecord& a : attempts) {
    if (a.status != AttemptStatus::kDone) continue;
    for (size_t i = 0; i < config.members.size(); ++i) {
      if (config.members[i].name != a.member) continue;
      MemberResult& r = results[i];
      r.done = true;
      r.attempt = a.attempt;
      r.checkpoint = a.checkpoint.value_or("");
      json predictions = json::parse(a.predictions_json.value_or("{}"), nullptr, false);
      r.predictions_pool = JsonStringField(predictions, "pool");
      r.predictions_test = JsonStringField(predictions, "test");
      r.predictions_train = JsonStringField(predictions, "train");
      json metrics = json::parse(a.metrics_json.value_or("{}"), nullptr, false);
      r.train_seconds = JsonNumberField(metrics, "seconds").value_or(0);
      r.predict_seconds = JsonNumberField(metrics, "predict_seconds").value_or(0);
    }
  }
  return results;
}

int NextAttemptNumber(const std::vector<AttemptRecord>& attempts, const std::string& member) {
  int last = 0;
  for (const AttemptRecord& a : attempts) {
    if (a.member == member) last = std::max(last, a.attempt);
  }
  return last + 1;
}

bool CountsAsFailure(AttemptStatus status) {
  return status == AttemptStatus::kFailed || status == AttemptStatus::kKilled;
}

MemberPlan PlanMembers(const LoopConfig& config, const std::vector<AttemptRecord>& attempts,
                       bool retry_failed, bool predict_pool,
                       const std::vector<MemberResult>& previous, const std::string& run_root,
                       std::vector<MemberResult>* results) {
  const size_t n = config.members.size();
  MemberPlan plan;
  plan.failures.assign(n, 0);
  plan.out_of_attempts.assign(n, false);
  const int tries = static_cast<int>(1 + config.failure.retries);
  for (size_t i = 0; i < n; ++i) {
    if ((*results)[i].done) continue;
    const MemberConfig& member = config.members[i];
    MemberTask task;
    task.index = i;
    task.member = &member;
    task.predict_pool = predict_pool;
    // Update steps run after every round that acquires, so after the rounds that predict the pool.
    task.predict_train = predict_pool && UpdatesReadTrainPredictions(config);
    for (const AttemptRecord& a : attempts) {
      if (a.member == member.name && CountsAsFailure(a.status)) ++plan.failures[i];
    }
    task.next_attempt = NextAttemptNumber(attempts, member.name);
    task.attempts_left = tries - plan.failures[i];
    if (task.attempts_left <= 0) {
      if (!retry_failed) {
        plan.out_of_attempts[i] = true;
        for (const AttemptRecord& a : attempts) {
          if (a.member == member.name && a.exit) (*results)[i].error = *a.exit;
        }
        continue;
      }
      task.attempts_left = 1;
    }
    if (member.warm_start && i < previous.size() && previous[i].done) {
      // A script need not have written its checkpoint; then it starts afresh.
      std::string checkpoint = run_root + "/" + previous[i].checkpoint;
      if (std::filesystem::exists(checkpoint)) task.warm_start_from = checkpoint;
    }
    plan.tasks.push_back(task);
  }
  return plan;
}

std::string DescribeResumedRound(const LoopConfig& config, int64_t round, uint64_t generation,
                                 const MemberPlan& plan, const std::vector<MemberResult>& results) {
  // Names past the first few are counted, so a 64-member run still gets one readable line.
  constexpr size_t kNamed = 6;
  auto list = [&](const std::vector<std::string>& items) {
    std::string text;
    for (size_t i = 0; i < items.size() && i < kNamed; ++i) {
      text += (i > 0 ? ", " : "") + items[i];
    }
    if (items.size() > kNamed) text += fmt::format(" and {} more", items.size() - kNamed);
    return text;
  };
  std::vector<std::string> kept;
  std::vector<std::string> failed;
  for (size_t i = 0; i < config.members.size(); ++i) {
    if (results[i].done) kept.push_back(config.members[i].name);
    if (plan.out_of_attempts[i]) failed.push_back(config.members[i].name);
  }
  std::vector<std::string> again;
  for (const MemberTask& task : plan.tasks) {
    int failures = plan.failures[task.index];
    again.push_back(fmt::format(
        "{} (attempt {}, {} tr{} left{})", task.member->name, task.next_attempt, task.attempts_left,
        task.attempts_left == 1 ? "y" : "ies",
        failures > 0 ? fmt::format(" after {} failure{}", failures, failures == 1 ? "" : "s")
                     : ""));
  }
  std::vector<std::string> parts;
  if (!kept.empty()) {
    parts.push_back(list(kept) + (kept.size() == 1 ? " keeps its finished attempt"
                                                   : " keep their finished attempts"));
  }
  if (!again.empty())
    parts.push_back(list(again) + (again.size() == 1 ? " runs again" : " run again"));
  if (!failed.empty()) {
    parts.push_back(list(failed) + (failed.size() == 1 ? " stays" : " stay") +
                    " failed (out of attempts)");
  }
  std::string text = fmt::format("round {} resumes on generation {}", round, generation);
  for (size_t i = 0; i < parts.size(); ++i) text += (i == 0 ? ": " : "; ") + parts[i];
  return text;
}

void OrderLongestFirst(const std::vector<AttemptRecord>& previous_round,
                       std::vector<MemberTask>* tasks) {
  std::map<std::string, double> took;
  for (const AttemptRecord& a : previous_round) {
    if (a.status != AttemptStatus::kDone || !a.metrics_json) continue;
    auto seconds = JsonNumberField(json::parse(*a.metrics_json, nullptr, false), "attempt_seconds");
    if (seconds) took[a.member] = *seconds;
  }
  std::stable_sort(tasks->begin(), tasks->end(), [&](const MemberTask& x, const MemberTask& y) {
    return took[x.member->name] > took[y.member->name];
  });
}

}  // namespace cohort::loop
