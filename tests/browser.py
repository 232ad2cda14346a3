"""A headless Chromium driven through chromedriver's WebDriver HTTP protocol, with the Python
standard library only (urllib, json): enough to load a page, run JavaScript in it, read the
browser console and take screenshots. Debian packages: chromium, chromium-driver
(scripts/bootstrap installs them). Nothing is downloaded.

    with Browser() as b:
        b.open("file:///tmp/report.html")
        b.console_errors()          # SEVERE console entries since the last call
        b.run("return document.title")
        b.screenshot("page.png", full_page=True)
"""
import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def available():
    """None when a browser can run here, else why not."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(path):
            return f"{path} is missing (apt-get install chromium chromium-driver)"
    return None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WebDriverError(Exception):
    pass


class Browser:
    def __init__(self, width=1200, height=900):
        self.width, self.height = width, height
        self.port = _free_port()
        self.profile = tempfile.mkdtemp(prefix="cohort-chromium-")
        self.log = open(os.path.join(self.profile, "chromedriver.log"), "w")
        self.driver = subprocess.Popen([CHROMEDRIVER, f"--port={self.port}"], stdout=self.log,
                                       stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 30
        while True:
            try:
                self._request("GET", "/status")
                break
            except (OSError, WebDriverError):
                if time.time() > deadline or self.driver.poll() is not None:
                    self.close()
                    raise WebDriverError("chromedriver did not start")
                time.sleep(0.1)
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--hide-scrollbars",
                         "--force-device-scale-factor=1", f"--user-data-dir={self.profile}/data",
                         f"--window-size={width},{height}"]},
            "goog:loggingPrefs": {"browser": "ALL"}}}}
        try:
            self.session = self._request("POST", "/session", caps)["sessionId"]
        except Exception:
            self.close()
            raise

    def _request(self, method, path, body=None, timeout=60):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                out = json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")
            raise WebDriverError(f"{method} {path}: HTTP {e.code}: {detail[:500]}") from None
        return out.get("value", out)

    def _session(self, method, path, body=None):
        return self._request(method, f"/session/{self.session}{path}", body)

    def open(self, url):
        self._session("POST", "/url", {"url": url})

    def run(self, script, *args):
        """Runs `script` (a function body; `arguments` holds args) and returns its value."""
        return self._session("POST", "/execute/sync", {"script": script, "args": list(args)})

    def console(self):
        """Browser console entries since the last call: [{level, message}]."""
        return self._session("POST", "/se/log", {"type": "browser"})

    def console_errors(self):
        return [e for e in self.console() if e.get("level") == "SEVERE"]

    def screenshot(self, path, full_page=False):
        if full_page:
            height = self.run("return Math.ceil(document.documentElement.scrollHeight)")
            self._session("POST", "/window/rect", {"width": self.width, "height": int(height)})
        png = base64.b64decode(self._session("GET", "/screenshot"))
        if full_page:
            self._session("POST", "/window/rect", {"width": self.width, "height": self.height})
        with open(path, "wb") as f:
            f.write(png)
        return len(png)

    def element_screenshot(self, css, path):
        el = self._session("POST", "/element", {"using": "css selector", "value": css})
        eid = next(iter(el.values()))
        png = base64.b64decode(self._session("GET", f"/element/{eid}/screenshot"))
        with open(path, "wb") as f:
            f.write(png)
        return len(png)

    def close(self):
        if getattr(self, "session", None):
            try:
                self._request("DELETE", f"/session/{self.session}", timeout=20)
            except Exception:
                pass
            self.session = None
        if self.driver.poll() is None:
            self.driver.terminate()
            try:
                self.driver.wait(10)
            except subprocess.TimeoutExpired:
                self.driver.kill()
                self.driver.wait()
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
