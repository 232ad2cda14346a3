#include "cli/report/report_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <span>
#include <thread>

#include "cli/report/report_data.h"
#include "cli/report/report_html.h"
#include "common/file_util.h"

namespace cohort::cli {

namespace {

struct ReportOptions {
  std::string run_dir;
  std::string out = "report.html";
  double watch_s = 0;
  int images = 16;
  std::string version;
};

// Writes the report once; sets *running when the run is still going.
Status WriteReport(const ReportOptions& o, bool* running) {
  GatherOptions g;
  g.images_per_round = o.images;
  COHORT_ASSIGN_OR_RETURN(ReportData data, GatherReport(o.run_dir, g));
  data.cohort_version = o.version;
  HtmlOptions h;
  h.refresh_s = o.watch_s > 0 ? std::max(1, static_cast<int>(o.watch_s)) : 30;
  const std::string html = RenderReportHtml(data, h);
  COHORT_RETURN_IF_ERROR(
      WriteFileAtomically(o.out, {std::as_bytes(std::span<const char>(html.data(), html.size()))}));
  *running = data.status == "running";
  fmt::print("wrote {} (run {} {}, {} rounds, {:.0f} KiB)\n", o.out, data.name, data.status,
             data.rounds.size(), static_cast<double>(html.size()) / 1024);
  std::fflush(stdout);
  return Status::OK();
}

Status RunReport(const ReportOptions& o) {
  bool running = false;
  COHORT_RETURN_IF_ERROR(WriteReport(o, &running));
  while (o.watch_s > 0 && running) {
    std::this_thread::sleep_for(std::chrono::duration<double>(o.watch_s));
    COHORT_RETURN_IF_ERROR(WriteReport(o, &running));
  }
  return Status::OK();
}

}  // namespace

void AddReportCommand(CLI::App& app, std::function<Status()>* run, const char* version) {
  auto o = std::make_shared<ReportOptions>();
  o->version = version;
  auto* cmd = app.add_subcommand("report", "Write a run's charts as one self-contained HTML file");
  cmd->add_option("run_dir", o->run_dir, "the run directory (runs/NAME)")->required();
  cmd->add_option("-o,--out", o->out, "the HTML file to write (default report.html)");
  cmd->add_option("--watch", o->watch_s,
                  "rewrite the file every SECONDS while the run goes (the page reloads itself)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--images", o->images, "best-scored picks shown per round (default 16)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([o, run] { *run = [o] { return RunReport(*o); }; });
}

}  // namespace cohort::cli
