// `cohort report`'s page: one self-contained HTML file laid out from ReportData, with inline
// SVG charts (svg_chart.h), inline PNG thumbnails and one small inline script (the round
// chooser of the loss curves; everything else works without it, and in print).
//
// Sections, in order (ids in parentheses, for links and tests): summary (#summary), test
// metrics against round and labels (#metrics), device timeline (#timeline), time per round
// (#time), dataset sizes and changes (#dataset), picks (#picks), training loss (#loss),
// reliability of the final ensemble (#reliability), config and machine (#config).
//
// Thread-safety: a pure function.
#pragma once

#include <string>

#include "cli/report/report_data.h"

namespace cohort::cli {

struct HtmlOptions {
  int refresh_s = 30;  // a running run's page reloads itself this often (0: never)
};

std::string RenderReportHtml(const ReportData& data, const HtmlOptions& options = {});

}  // namespace cohort::cli
