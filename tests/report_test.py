#!/usr/bin/env python3
"""End-to-end tests of `cohort report`: the report of a small real run (three members, three
rounds, one worker SIGKILLed and retried) rendered in headless Chromium (tests/browser.py):
it loads with no console error, every chart is there with its title, axis labels and legend,
its numbers are the journal's, and a screenshot is saved (SCRATCH/report.png). Also the report
of a regression run (RMSE, MAE, NLL and calibration charts, the picks' scores, interval
coverage; SCRATCH/report-regression.png), of a running run, and bad input.

Run by ctest as: /usr/bin/python3 tests/report_test.py COHORT_BINARY SCRATCH_DIR
"""
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import browser  # noqa: E402
import loop_test  # noqa: E402
import regression_loop_test  # noqa: E402

COHORT = None
SCRATCH = None
RUN = None  # the finished run every test reads
REG_RUN = None  # a finished regression run

CHARTS = ["accuracy-by-round", "accuracy-by-labels", "nll-by-round", "nll-by-labels",
          "ece-by-round", "ece-by-labels", "timeline", "time-per-round", "dataset-size",
          "picks-by-class", "loss-round-0", "loss-round-1", "loss-round-2", "reliability",
          "reliability-calibrated", "reliability-counts"]


def cohort(*args, check=True):
    return loop_test.cohort(*args, check=check)


def journal(run_dir):
    return loop_test.journal(run_dir)


def wait_for(fn, what, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def running_attempt(run_dir, member, round_=0):
    if not os.path.exists(os.path.join(run_dir, "run.db")):
        return None
    try:
        db = journal(run_dir)
        row = db.execute("SELECT pid FROM attempts WHERE member = ? AND round = ? AND "
                         "status = 'running' AND pid IS NOT NULL", (member, round_)).fetchone()
        db.close()
    except sqlite3.OperationalError:
        return None
    return row[0] if row and row[0] else None


def make_run():
    """Three rounds of three members; mlp-a's first worker is SIGKILLed in round 0 and
    retried. Returns the run directory."""
    d = os.path.join(SCRATCH, "finished")
    config = loop_test.write_config(d, name="report-demo", epochs=60)
    run_dir = os.path.join(d, "runs", "report-demo")
    proc = subprocess.Popen([COHORT, "run", config, "--plain"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    pid = wait_for(lambda: running_attempt(run_dir, "mlp-a"), "mlp-a's attempt")
    time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"cohort run exited {proc.returncode}:\n{out}\n{err}")
    return run_dir


class ReportOfAFinishedRun(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.html_path = os.path.join(SCRATCH, "report.html")
        cls.proc = cohort("report", RUN, "-o", cls.html_path)
        with open(cls.html_path) as f:
            cls.html = f.read()
        db = journal(RUN)
        cls.rounds = db.execute("SELECT round, test_accuracy, test_nll, test_ece, labels_total, "
                                "test_nll_calibrated, test_ece_calibrated, test_temperature "
                                "FROM rounds ORDER BY round").fetchall()
        cls.attempts = db.execute("SELECT member, round, attempt, status FROM attempts"
                                  ).fetchall()
        db.close()

    def test_each_ece_comes_with_the_range_of_a_perfectly_calibrated_model(self):
        # The raw and the calibrated ensemble's ECE, each with the 5-95% range a perfectly
        # calibrated model with those confidences reads on the test table: drawn here again,
        # with numpy, from the final round's prediction files.
        import numpy as np
        found = re.findall(r"ECE (\d\.\d{4}) \(if perfectly calibrated: (\d\.\d{4})-(\d\.\d{4})\)",
                           self.html)
        self.assertEqual(len(found), 2, found)
        last = self.rounds[-1]
        self.assertEqual(found[0][0], f"{last['test_ece']:.4f}")
        self.assertEqual(found[1][0], f"{last['test_ece_calibrated']:.4f}")
        db = journal(RUN)
        paths = [row[0] for row in db.execute(
            "SELECT json_extract(predictions_json, '$.test') FROM attempts "
            "WHERE round = ? AND status = 'done' ORDER BY member", (last["round"],))]
        db.close()
        mean = np.mean([np.load(os.path.join(RUN, p)) for p in paths], axis=0)
        confidence = mean.max(1).astype(np.float64)
        n = len(confidence)
        bins = np.minimum((confidence * 15).astype(int), 14)
        rng = np.random.default_rng(0)
        correct = rng.random((4000, n)) < confidence
        eces = np.zeros(4000)
        for b in np.unique(bins):
            in_bin = bins == b
            eces += np.abs(correct[:, in_bin].sum(1) - confidence[in_bin].sum())
        eces /= n
        low, high = np.percentile(eces, [5, 95])
        page_low, page_high = float(found[0][1]), float(found[0][2])
        self.assertLess(page_low, page_high)
        # 200 draws on the page against 4,000 here: the percentiles agree to sampling noise.
        self.assertAlmostEqual(page_low, low, delta=0.25 * low + 0.002)
        self.assertAlmostEqual(page_high, high, delta=0.15 * high + 0.002)
        self.assertIn(f"on {n} samples", self.html)

    def test_the_final_ensemble_is_compared_with_each_member(self):
        # The table under the reliability diagrams: the ensemble, raw and calibrated, and each
        # member alone on the same test rows, whose NLL and ECE are those the loop journalled
        # for that member in the final round; the sentence under it counts the members the
        # ensemble beats and names the others.
        table = re.search(r'<table id="ensemble-vs-members">(.*?)</table>', self.html)
        self.assertIsNotNone(table)
        rows = {}
        for cells in re.findall(r"<tr>(<td>.*?)</tr>", table.group(1)):
            tds = re.findall(r"<td>(.*?)</td>", cells)
            rows[tds[0]] = tds[1:]
        last = self.rounds[-1]
        self.assertEqual(rows["ensemble (mean)"][0], f"{last[1]:.4f}")
        self.assertEqual(rows["ensemble (mean)"][1], f"{last[2]:.4f}")
        self.assertEqual(rows["ensemble (mean)"][3], f"{last[3]:.4f}")
        calibrated = rows["ensemble, calibrated (cross-fitted)"]
        self.assertEqual(calibrated[1], f"{last[5]:.4f}")
        self.assertEqual(calibrated[3], f"{last[6]:.4f}")
        db = journal(RUN)
        metrics = {}
        for member, metric, value in db.execute(
                "SELECT member, metric, value FROM member_metrics WHERE round = ?", (last[0],)):
            metrics.setdefault(member, {})[metric] = value
        db.close()
        members = sorted(name for name in rows if not name.startswith("ensemble"))
        self.assertEqual(members, sorted(metrics))
        for name in members:
            self.assertEqual(rows[name][0], f"{metrics[name]['accuracy']:.4f}", name)
            self.assertEqual(rows[name][1], f"{metrics[name]['nll']:.4f}", name)
            self.assertEqual(rows[name][3], f"{metrics[name]['ece']:.4f}", name)
            self.assertRegex(rows[name][4], r"^0\.\d{4} \(0\.\d{4}-0\.\d{4}\)$")
        nll_below = sum(last[5] < metrics[m]["nll"] for m in members)
        ece_not_below = sorted(m for m in members if not last[6] < metrics[m]["ece"])
        summary = re.search(r'<p id="ensemble-vs-members-summary">(.*?)</p>', self.html).group(1)
        n = len(members)

        def below(k):
            return f"below every member's ({n})" if k == n else f"below {k} of the {n} members'"
        self.assertIn(f"NLL {last[5]:.4f}, {below(nll_below)}; "
                      f"ECE {last[6]:.4f}, {below(n - len(ece_not_below))}.", summary)
        for m in ece_not_below:
            self.assertIn(f" {m} reads ECE {metrics[m]['ece']:.4f}, ", summary)

    def test_the_run_had_a_retry(self):
        # The run the report shows: a failed attempt and its retry, three finished rounds.
        self.assertIn(("mlp-a", 0, 1, "failed"), [tuple(a) for a in self.attempts])
        self.assertIn(("mlp-a", 0, 2, "done"), [tuple(a) for a in self.attempts])
        self.assertEqual(len(self.rounds), 3)
        self.assertIn("wrote " + self.html_path, self.proc.stdout)

    def test_self_contained(self):
        # No fetch of anything: the only URL is the SVG namespace (a name, never loaded).
        urls = set(re.findall(r"https?://[^\s\"'<>)]+", self.html))
        self.assertEqual(urls, {"http://www.w3.org/2000/svg"})
        self.assertNotRegex(self.html, r"<(link|iframe)\b")
        self.assertNotRegex(self.html, r"<script[^>]*\bsrc=")
        self.assertNotRegex(self.html, r"<img[^>]*src=\"(?!data:image/png;base64,)")
        self.assertNotIn("http-equiv=\"refresh\"", self.html)  # finished: no reload
        self.assertIn("<span class=\"status finished\">finished</span>", self.html)
        # The libtorch the workers named in their hello, journalled with their attempts.
        self.assertRegex(self.html, r"libtorch the native members trained with</th>"
                                    r"<td class=\"l\">\d+\.\d+")

    def test_in_chromium(self):
        why = browser.available()
        if why:
            if os.environ.get("CI") == "true":
                self.fail(why)
            self.skipTest(why)
        with browser.Browser(width=1200, height=1000) as b:
            b.open("file://" + self.html_path)
            self.assertEqual(b.console_errors(), [])
            charts = b.run("""
                return Array.from(document.querySelectorAll('svg.chart')).map(function (c) {
                  var r = c.getBoundingClientRect();
                  var q = function (s) { return Array.from(c.querySelectorAll(s)); };
                  return {id: c.dataset.chart, width: r.width, height: r.height,
                          title: q('.chart-title').map(function (t) { return t.textContent; }),
                          axes: q('.axis-label').map(function (t) {
                            return [t.dataset.axis, t.textContent]; }),
                          legend: q('.legend-item').map(function (t) { return t.textContent; }),
                          series: q('g.series').map(function (g) { return g.dataset.series; }),
                          spans: q('g.span title').map(function (t) { return t.textContent; }),
                          crosses: q('.cross').length, ticks: q('.tick').length};
                });""")
            by_id = {c["id"]: c for c in charts}
            self.assertEqual(sorted(by_id), sorted(CHARTS))
            for c in charts:
                with self.subTest(chart=c["id"]):
                    self.assertEqual(len(c["title"]), 1)
                    self.assertGreater(len(c["title"][0]), 5)
                    self.assertEqual(sorted(a for a, _ in c["axes"]), ["x", "y"])
                    for _, label in c["axes"]:
                        self.assertGreater(len(label), 3)
                    self.assertGreater(c["ticks"], 3)
                    if len(c["series"]) > 1:  # a legend entry per series
                        self.assertEqual(c["legend"], c["series"])
                    if not c["id"].startswith("loss-round-") or c["id"] == "loss-round-2":
                        self.assertGreater(c["width"], 300)  # laid out and visible
                        self.assertGreater(c["height"], 100)
            self.assertEqual(by_id["accuracy-by-round"]["series"],
                             ["mlp-a", "mlp-b", "cnn-c", "ensemble"])
            for metric in ("nll", "ece"):  # calibration cannot change the accuracy
                self.assertEqual(by_id[f"{metric}-by-round"]["series"],
                                 ["mlp-a", "mlp-b", "cnn-c", "ensemble", "ensemble, calibrated"])
            # The timeline marks the failure and shows the retry.
            tl = by_id["timeline"]
            self.assertEqual(len(tl["legend"]), 5)
            self.assertGreaterEqual(tl["crosses"], 1)
            self.assertEqual(len(tl["spans"]), len(self.attempts))
            self.assertTrue(any("mlp-a round 0 attempt 1 on cpu:" in s and ": failed" in s
                                for s in tl["spans"]), tl["spans"])
            self.assertTrue(any("mlp-a round 0 attempt 2" in s for s in tl["spans"]))
            # The loss curves of the last round show; another round shows when chosen.
            visible = b.run("""return Array.from(document.querySelectorAll(
                '[data-round-panel]')).filter(function (p) { return !p.hidden; })
                .map(function (p) { return p.dataset.round; });""")
            self.assertEqual(visible, ["2"])
            b.run("""var s = document.querySelector('select[data-panels]'); s.value = '0';
                     s.dispatchEvent(new Event('change'));""")
            visible = b.run("""return Array.from(document.querySelectorAll(
                '[data-round-panel]')).filter(function (p) { return !p.hidden; })
                .map(function (p) { return p.dataset.round; });""")
            self.assertEqual(visible, ["0"])
            # The ensemble's numbers are the journal's.
            table = b.run("""return Array.from(document.querySelectorAll('#metrics table tr'))
                .slice(1).map(function (r) { return Array.from(r.cells).map(
                function (c) { return c.textContent; }); });""")
            for row, r in zip(table, self.rounds):
                self.assertEqual(row[0], str(r["round"]))
                self.assertEqual(row[2], f"{r['test_accuracy']:.4f}")
                self.assertEqual(row[3], f"{r['test_nll']:.4f}")
                self.assertEqual(row[5], f"{r['test_ece']:.4f}")
                self.assertEqual(row[6], f"{r['test_nll_calibrated']:.4f}")
                self.assertEqual(row[7], f"{r['test_ece_calibrated']:.4f}")
                self.assertEqual(row[8], f"{r['test_temperature']:.4f}")
            # The reliability diagram is of the final ensemble: its ECE is the journal's.
            self.assertIn(f"ECE {self.rounds[-1]['test_ece']:.4f}",
                          by_id["reliability"]["title"][0])
            # Beside it the same predictions calibrated as the loop does: the journal's
            # cross-fitted ECE, recomputed by the report from the members' prediction files.
            self.assertIn(f"cross-fitted ECE {self.rounds[-1]['test_ece_calibrated']:.4f}",
                          by_id["reliability-calibrated"]["title"][0])
            self.assertIn(f"(fitted on every row: {self.rounds[-1]['test_temperature']:.3f},",
                          b.run("return document.querySelector('#reliability p').textContent;"))
            # Acquired images: 16 per acquiring round, all decoded by the browser.
            images = b.run("""return Array.from(document.querySelectorAll('figure.pick img'))
                .map(function (i) { return [i.naturalWidth, i.naturalHeight]; });""")
            self.assertEqual(images, [[28, 28]] * 32)
            shot = os.path.join(SCRATCH, "report.png")
            self.assertGreater(b.screenshot(shot, full_page=True), 50000)
            b.element_screenshot("#timeline", os.path.join(SCRATCH, "report-timeline.png"))
            self.assertEqual(b.console_errors(), [])
            print(f"screenshot: {shot}", file=sys.stderr)

    def test_console_errors_are_seen(self):
        # The check above can fail: a page with a script error is reported.
        why = browser.available()
        if why:
            self.skipTest(why)
        bad = os.path.join(SCRATCH, "broken.html")
        with open(bad, "w") as f:
            f.write("<!DOCTYPE html><title>x</title><script>no_such_function();</script>")
        with browser.Browser() as b:
            b.open("file://" + bad)
            errors = b.console_errors()
        self.assertEqual(len(errors), 1, errors)
        self.assertIn("no_such_function", errors[0]["message"])


REGRESSION_CHARTS = ["rmse-by-round", "rmse-by-labels", "mae-by-round", "mae-by-labels",
                     "nll-by-round", "nll-by-labels", "calibration-by-round",
                     "calibration-by-labels", "timeline", "time-per-round", "dataset-size",
                     "picks-by-score", "loss-round-0", "loss-round-1", "coverage"]


def chart_summaries(b):
    return b.run("""
        return Array.from(document.querySelectorAll('svg.chart')).map(function (c) {
          var q = function (s) { return Array.from(c.querySelectorAll(s)); };
          var r = c.getBoundingClientRect();
          return {id: c.dataset.chart, width: r.width, height: r.height,
                  title: q('.chart-title').map(function (t) { return t.textContent; }),
                  axes: q('.axis-label').map(function (t) {
                    return [t.dataset.axis, t.textContent]; }),
                  legend: q('.legend-item').map(function (t) { return t.textContent; }),
                  series: q('g.series').map(function (g) { return g.dataset.series; }),
                  ticks: q('.tick').length};
        });""")


class ReportOfARegressionRun(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.html_path = os.path.join(SCRATCH, "report-regression.html")
        cohort("report", REG_RUN, "-o", cls.html_path)
        with open(cls.html_path) as f:
            cls.html = f.read()
        db = journal(REG_RUN)
        cls.rounds = db.execute("SELECT round, test_rmse, test_mae, test_nll, test_calibration "
                                "FROM rounds ORDER BY round").fetchall()
        cls.picks = db.execute("SELECT round, score FROM acquisitions").fetchall()
        db.close()

    def test_no_classification_in_the_page(self):
        self.assertEqual(len(self.rounds), 2)
        self.assertNotIn("accuracy", self.html.lower())
        self.assertNotIn("ECE", self.html)
        self.assertIn("Regression run: no classes.", self.html)
        self.assertIn("test RMSE after round 1", self.html)

    def test_in_chromium(self):
        why = browser.available()
        if why:
            if os.environ.get("CI") == "true":
                self.fail(why)
            self.skipTest(why)
        with browser.Browser(width=1200, height=1000) as b:
            b.open("file://" + self.html_path)
            self.assertEqual(b.console_errors(), [])
            charts = chart_summaries(b)
            by_id = {c["id"]: c for c in charts}
            self.assertEqual(sorted(by_id), sorted(REGRESSION_CHARTS))
            for c in charts:
                with self.subTest(chart=c["id"]):
                    self.assertEqual(len(c["title"]), 1)
                    self.assertEqual(sorted(a for a, _ in c["axes"]), ["x", "y"])
                    for _, label in c["axes"]:
                        self.assertGreater(len(label), 3)
                    self.assertGreater(c["ticks"], 3)
                    if len(c["series"]) > 1:
                        self.assertEqual(c["legend"], c["series"])
                    if c["id"] != "loss-round-0":  # hidden until chosen
                        self.assertGreater(c["width"], 300)
                        self.assertGreater(c["height"], 100)
            members = [m[0] for m in regression_loop_test.MEMBERS]
            want = {"rmse": ("RMSE", "test RMSE (target units)"),
                    "mae": ("MAE", "test MAE (target units)"),
                    "nll": ("NLL", "test NLL (nats per target component)"),
                    "calibration": ("Calibration error", "test calibration (coverage gap)")}
            for metric, (title, label) in want.items():
                for by, x in (("round", "round"),
                              ("labels", "labels trained on (rows of train)")):
                    c = by_id[f"{metric}-by-{by}"]
                    self.assertEqual(c["title"], [f"{title} by "
                                                  f"{'round' if by == 'round' else 'labels used'}"])
                    self.assertEqual(dict(c["axes"]), {"x": x, "y": label})
                    self.assertEqual(c["series"], members + ["ensemble"])
            # The ensemble's numbers are the journal's.
            table = b.run("""return Array.from(document.querySelectorAll('#metrics table tr'))
                .slice(1).map(function (r) { return Array.from(r.cells).map(
                function (c) { return c.textContent; }); });""")
            self.assertEqual(len(table), len(self.rounds))
            for row, r in zip(table, self.rounds):
                self.assertEqual(row[0], str(r["round"]))
                self.assertEqual(row[2:6], [f"{r[k]:.4f}" for k in
                                            ("test_rmse", "test_mae", "test_nll",
                                             "test_calibration")])
            # The coverage plot: nominal against observed, the ensemble's calibration error is
            # the journal's, one point per level of regression.h's kCoverageLevels.
            cov = by_id["coverage"]
            self.assertEqual(cov["title"], [f"Interval coverage, round 1 (calibration error "
                                            f"{self.rounds[-1]['test_calibration']:.4f})"])
            self.assertEqual(dict(cov["axes"]),
                             {"x": "nominal coverage (probability of the central interval)",
                              "y": "observed coverage (fraction of targets inside)"})
            self.assertEqual(cov["series"], members + ["ensemble"])
            levels = b.run("""return Array.from(document.querySelectorAll(
                '#reliability table tr')).slice(1).map(function (r) {
                return r.cells[0].textContent; });""")
            self.assertEqual(levels, ["0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8",
                                      "0.9", "0.95"])
            # The picks' scores: every pick counted once, in the rounds that picked.
            picks = by_id["picks-by-score"]
            self.assertEqual(dict(picks["axes"])["x"], "max_deviation score (middle of the range)")
            cells = b.run("""return Array.from(document.querySelectorAll(
                'svg[data-chart="picks-by-score"] text.cell')).map(function (t) {
                return Number(t.textContent); });""")
            self.assertEqual(sum(cells), len(self.picks))
            shot = os.path.join(SCRATCH, "report-regression.png")
            self.assertGreater(b.screenshot(shot, full_page=True), 50000)
            self.assertEqual(b.console_errors(), [])


class ReportOfARunningRun(unittest.TestCase):
    def test_says_running_and_reloads(self):
        d = os.path.join(SCRATCH, "running")
        config = loop_test.write_config(d, name="live", rounds=1, epochs=1000,
                                        members=loop_test.MEMBERS[:1], devices=1,
                                        strategy="entropy")
        run_dir = os.path.join(d, "runs", "live")
        proc = subprocess.Popen([COHORT, "run", config, "--plain"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: proc.poll() is not None or running_attempt(run_dir, "mlp-a"),
                     "the attempt")
            # Stopped, the controller still holds the run: it is running, mid-attempt.
            os.kill(proc.pid, signal.SIGSTOP)
            self.assertIsNone(proc.poll())
            out = os.path.join(d, "live.html")
            cohort("report", run_dir, "-o", out)
            with open(out) as f:
                html = f.read()
            self.assertTrue('<meta http-equiv="refresh" content="30">' in html)
            self.assertTrue(f"still running (controller pid {proc.pid})" in html)
            self.assertTrue("<span class=\"status running\">running</span>" in html)
            self.assertTrue("round 0 attempt 1 on cpu:0: running" in html)  # on the timeline
            # --watch rewrites the file until the run ends.
            watch = subprocess.Popen([COHORT, "report", run_dir, "-o", out, "--watch", "0.2"],
                                     stdout=subprocess.PIPE, text=True)
            time.sleep(1)
            self.assertIsNone(watch.poll())
            os.kill(proc.pid, signal.SIGCONT)
            proc.wait(timeout=300)
            self.assertEqual(proc.returncode, 0, proc.stderr.read())
            out_text, _ = watch.communicate(timeout=60)
            self.assertEqual(watch.returncode, 0)
            lines = out_text.splitlines()
            self.assertGreaterEqual(len(lines), 3, lines)
            self.assertIn("run live running", lines[0])
            self.assertIn("run live finished", lines[-1])
            with open(out) as f:
                self.assertFalse("http-equiv=\"refresh\"" in f.read())
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait()
            proc.stderr.close()


class BadInput(unittest.TestCase):
    def test_missing_run_dir(self):
        p = cohort("report", os.path.join(SCRATCH, "nope"), check=False)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(p.stderr.strip().splitlines(),
                         [f"cohort: error: {SCRATCH}/nope: not a cohort run directory (no "
                          "loop.toml and run.db)"])

    def test_unwritable_output(self):
        p = cohort("report", RUN, "-o", os.path.join(SCRATCH, "no-dir", "r.html"), check=False)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn("no-dir/r.html", p.stderr)


def main():
    global COHORT, SCRATCH, RUN, REG_RUN
    COHORT = os.path.abspath(sys.argv[1])
    SCRATCH = os.path.abspath(sys.argv[2])
    os.makedirs(SCRATCH, exist_ok=True)
    loop_test.COHORT = COHORT
    loop_test.SCRATCH = SCRATCH
    loop_test.SOURCE = os.path.join(SCRATCH, "source-store")
    loop_test.build_source(loop_test.SOURCE)
    import shutil
    shutil.rmtree(os.path.join(SCRATCH, "finished"), ignore_errors=True)
    shutil.rmtree(os.path.join(SCRATCH, "running"), ignore_errors=True)
    RUN = make_run()
    # A regression run: two rounds of the regression loop test's three members.
    reg_source = os.path.join(SCRATCH, "regression-source")
    regression_loop_test.build_source(reg_source)
    reg_parent = os.path.join(SCRATCH, "regression")
    shutil.rmtree(reg_parent, ignore_errors=True)
    cohort("run", regression_loop_test.write_config(reg_parent, rounds=2, epochs=20,
                                                    source=reg_source), "--plain")
    REG_RUN = os.path.join(reg_parent, "runs", "reg")
    unittest.main(argv=[sys.argv[0], *sys.argv[3:]], verbosity=2)


if __name__ == "__main__":
    main()
