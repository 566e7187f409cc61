"""The HTML report in a real browser: headless Chromium, network disabled.

How it works: Chromium runs with `--remote-debugging-pipe`, which speaks the
Chrome DevTools Protocol as NUL-terminated JSON over file descriptors 3
(commands in) and 4 (responses and events out) -- no websocket, no port, no
extra dependency. The network is disabled three ways (a black-hole proxy,
every host name unresolvable, and DevTools' offline emulation), then the
report is opened from a `file://` URL. The test records every request
(`Network.requestWillBeSent`), console message (`Runtime.consoleAPICalled`),
uncaught exception (`Runtime.exceptionThrown`) and browser log entry
(`Log.entryAdded`), and asserts: the only request is the file itself, no
console errors, no exceptions. It also clicks a sortable header, and saves
screenshots (light, dark, print media) under the test's tmp dir.

Chromium comes from Debian packages: when no chromium binary is on PATH the
module fixture runs `apt-get install -y chromium` (as root); where that is not
possible the tests are skipped with the reason.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from test_report_html import ANALYSES_IDS, render_case  # noqa: F401  (module-scoped analyses)

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome", "headless_shell")
INSTALL_TIMEOUT_S = 900
CDP_TIMEOUT_S = 60.0


def find_browser() -> str | None:
    env = os.environ.get("PROFANALYZE_CHROMIUM")
    if env and shutil.which(env):
        return shutil.which(env)
    for name in BROWSERS:
        p = shutil.which(name)
        if p:
            return p
    return None


def install_chromium() -> tuple[str | None, str]:
    """Find Chromium, installing it from Debian packages when missing.
    Returns (path or None, why not)."""
    p = find_browser()
    if p:
        return p, ""
    if shutil.which("apt-get") is None:
        return None, "chromium is not installed and apt-get is not available (not a Debian/Ubuntu system)"
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return None, "chromium is not installed and installing it needs root (run: apt-get install -y chromium)"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        for cmd in (["apt-get", "install", "-y", "-q", "chromium"], ["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
            if cmd[1] == "install" and r.returncode == 0:
                break
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"apt-get install -y chromium failed: {e}"
    p = find_browser()
    if p:
        return p, ""
    tail = (r.stderr or r.stdout or "").strip().splitlines()[-3:]
    return None, "apt-get install -y chromium did not provide a chromium binary: " + " | ".join(tail)


class CDP:
    """A minimal Chrome DevTools Protocol client over --remote-debugging-pipe."""

    def __init__(self, browser: str, profile: Path):
        cmd_r, self._cmd_w = os.pipe()  # we write commands; chromium reads fd 3
        self._out_r, out_w = os.pipe()  # chromium writes fd 4; we read
        self.log_path = profile / "chromium.log"

        def child_fds() -> None:  # runs in the child before exec
            # Move both ends out of the way first (either may already be fd 3
            # or 4), then place them; dup2 leaves 3 and 4 inheritable.
            a = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(out_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile / 'profile'}",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--disable-features=Translate,MediaRouter,OptimizationHints",
            "--metrics-recording-only",
            "--mute-audio",
            "--hide-scrollbars",
            # network disabled: every proxy connection fails, every host name is unresolvable
            "--proxy-server=127.0.0.1:9",
            "--proxy-bypass-list=<-loopback>",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "about:blank",
        ]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=child_fds, close_fds=False
        )
        os.close(cmd_r)
        os.close(out_w)
        self._buf = b""
        self._next = 0
        self.events: list[dict] = []

    # -- transport ---------------------------------------------------------
    def _read_message(self, deadline: float) -> dict | None:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._out_r], [], [], left)
            if not ready:
                return None
            chunk = os.read(self._out_r, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium closed the DevTools pipe; log: {self.log_path}")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = CDP_TIMEOUT_S) -> dict:
        self._next += 1
        msg: dict = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._read_message(deadline)
            if m is None:
                raise TimeoutError(f"no answer to {method} within {timeout}s")
            if m.get("id") == self._next:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            if "method" in m:
                self.events.append(m)

    def wait_event(self, method: str, timeout: float = CDP_TIMEOUT_S) -> dict:
        for e in self.events:
            if e["method"] == method:
                return e
        deadline = time.monotonic() + timeout
        while True:
            m = self._read_message(deadline)
            if m is None:
                raise TimeoutError(f"no {method} event within {timeout}s")
            if "method" in m:
                self.events.append(m)
                if m["method"] == method:
                    return m

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while True:
            m = self._read_message(deadline)
            if m is None:
                return
            if "method" in m:
                self.events.append(m)

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except Exception:  # noqa: BLE001 - closing anyway
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for fd in (self._cmd_w, self._out_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()


@pytest.fixture(scope="module")
def browser() -> str:
    path, why = install_chromium()
    if path is None:
        pytest.skip(f"headless Chromium unavailable: {why}")
    return path


def _open_page(cdp: CDP, url: str, width: int = 1366, height: int = 900) -> str:
    target = cdp.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for m in ("Runtime.enable", "Log.enable", "Network.enable", "Page.enable"):
        cdp.send(m, session=session)
    cdp.send(
        "Network.emulateNetworkConditions",
        {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
        session=session,
    )
    cdp.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=session)
    cdp.events.clear()
    cdp.send("Page.navigate", {"url": url}, session=session)
    cdp.wait_event("Page.loadEventFired")
    cdp.drain(0.5)  # late requests / errors, if any
    return session


def _eval(cdp: CDP, session: str, expr: str):
    r = cdp.send("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True}, session=session)
    if "exceptionDetails" in r:
        raise AssertionError(f"evaluating {expr!r}: {r['exceptionDetails']}")
    return r["result"].get("value")


def _screenshot(cdp: CDP, session: str, path: Path, full: bool = False) -> Path:
    params: dict = {"format": "png"}
    if full:
        m = cdp.send("Page.getLayoutMetrics", session=session)
        size = m.get("cssContentSize") or m["contentSize"]
        params.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 16000), "scale": 1})
    data = cdp.send("Page.captureScreenshot", params, session=session)["data"]
    path.write_bytes(base64.b64decode(data))
    return path


def _problems(events: list[dict]) -> list[str]:
    out = []
    for e in events:
        p = e.get("params", {})
        if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append("console." + p["type"] + ": " + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
        elif e["method"] == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            out.append("exception: " + str(d.get("exception", {}).get("description") or d.get("text")))
        elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            ent = p["entry"]
            out.append(f"log error ({ent.get('source')}): {ent.get('text')} {ent.get('url', '')}")
    return out


def _requests(events: list[dict]) -> list[str]:
    return [e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"]


@pytest.fixture(scope="module")
def report_file(tmp_path_factory) -> Path:
    """The richest report available: the XSS scenario when synthesized
    traces exist (op names with markup), else the hand-built trace."""
    name = "xss_names" if "xss_names" in ANALYSES_IDS else ANALYSES_IDS[0]
    html = render_case(name)
    d = tmp_path_factory.mktemp("browser-report")
    p = d / f"{name}.report.html"
    p.write_text(html, encoding="utf-8")
    return p


def test_report_loads_offline_without_errors_or_requests(browser, report_file, tmp_path):
    cdp = CDP(browser, tmp_path)
    try:
        url = report_file.resolve().as_uri()
        session = _open_page(cdp, url)
        events = list(cdp.events)
        problems = _problems(events)
        requests = _requests(events)
        assert not problems, f"console errors / exceptions: {problems}"
        assert requests == [url], f"requests other than the report itself: {[r for r in requests if r != url]}"
        assert not [e for e in events if e["method"] == "Page.javascriptDialogOpening"], "a script opened a dialog (alert)"
        # The page rendered: sections and charts are in the DOM, the XSS op name is text.
        assert _eval(cdp, session, "document.querySelectorAll('section').length") >= 9
        assert _eval(cdp, session, "document.querySelectorAll('svg.chart').length") >= 3
        assert _eval(cdp, session, "document.scripts.length") == 1, "an injected <script> element exists"
        assert _eval(cdp, session, "typeof window.__xss") == "undefined"
        # Sorting works: click "Self ms/step" twice (descending, then ascending).
        order = """(function(){const t=document.getElementById('top-ops-table'); if(!t) return null;
            const col=[...t.tHead.rows[0].cells].findIndex(c=>c.textContent.trim().startsWith('Self ms'));
            const vals=()=>[...t.tBodies[0].rows].map(r=>parseFloat(r.cells[col].dataset.v));
            const th=t.tHead.rows[0].cells[col]; th.querySelector('button').click(); const a=vals(), s1=th.getAttribute('aria-sort');
            th.querySelector('button').click(); const b=vals(), s2=th.getAttribute('aria-sort');
            return {a:a, b:b, s1:s1, s2:s2};})()"""
        res = _eval(cdp, session, order)
        if res is not None and len(res["a"]) > 1:
            assert res["s1"] in ("ascending", "descending") and res["s2"] != res["s1"]
            assert sorted(res["a"]) in (res["a"], res["a"][::-1])
            assert res["b"] == res["a"][::-1] or sorted(res["b"]) == res["b"]
        # Copy button never throws (clipboard may be refused on file://).
        _eval(cdp, session, "(function(){const b=document.querySelector('button.copy'); if(b) b.click(); return 1;})()")
        cdp.drain(0.3)
        assert not _problems(cdp.events), _problems(cdp.events)
        # Screenshots: first screen (light), full page (light), dark mode, print media.
        shots = [_screenshot(cdp, session, tmp_path / "report-first-screen.png")]
        shots.append(_screenshot(cdp, session, tmp_path / "report-full.png", full=True))
        cdp.send("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]}, session=session)
        shots.append(_screenshot(cdp, session, tmp_path / "report-dark.png"))
        cdp.send("Emulation.setEmulatedMedia", {"media": "print", "features": []}, session=session)
        shots.append(_screenshot(cdp, session, tmp_path / "report-print.png"))
        for s in shots:
            assert s.stat().st_size > 10_000 and s.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", s
        assert _requests(cdp.events) == [url]
    finally:
        cdp.close()


def test_blocked_network_is_detected(browser, tmp_path):
    """The harness itself: a page that references a remote image and logs an
    error must fail the checks (so a passing report test means something)."""
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><html><head><title>bad</title></head><body>'
        '<img src="https://example.com/x.png" alt="">'
        "<script>console.error('boom')</script></body></html>",
        encoding="utf-8",
    )
    cdp = CDP(browser, tmp_path)
    try:
        url = page.resolve().as_uri()
        _open_page(cdp, url)
        reqs = _requests(cdp.events)
        assert any(r.startswith("https://example.com/") for r in reqs), reqs
        assert any("boom" in p for p in _problems(cdp.events)), cdp.events
    finally:
        cdp.close()


CHANGE_BOX_LAYOUT = """(function(){
  const out = [];
  document.querySelectorAll('.codeblock').forEach(function (box, k) {
    const pre = box.querySelector('pre'), code = box.querySelector('code'), btn = box.querySelector('button.copy');
    const cs = getComputedStyle(pre);
    const b = btn.getBoundingClientRect();
    let overlaps = 0, lines = 0;
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    for (let t = walker.nextNode(); t; t = walker.nextNode()) {
      for (let i = 0; i < t.length; i++) {
        if (/\\s/.test(t.data[i])) continue;
        const r = document.createRange(); r.setStart(t, i); r.setEnd(t, i + 1);
        for (const q of r.getClientRects()) {
          lines++;
          if (q.right > b.left && q.left < b.right && q.bottom > b.top && q.top < b.bottom) overlaps++;
        }
      }
    }
    out.push({box: k, whiteSpace: cs.whiteSpace, overflowWrap: cs.overflowWrap, wordBreak: cs.wordBreak,
              scroll: pre.scrollWidth, client: pre.clientWidth, glyphs: lines, overlaps: overlaps,
              text: code.textContent.slice(0, 60)});
  });
  return out;
})()"""


@pytest.mark.parametrize("width", [1366, 900])
def test_change_boxes_wrap_and_the_copy_button_covers_no_code(browser, tmp_path, width):
    """The CHANGE box of every card wraps its long lines (no horizontal
    scroll) and the Copy button sits where no character of the code is
    drawn: a report with a multi-line LIBTPU_INIT_ARGS block (SC001) and a
    long recipe comment (FP001)."""
    name = "offload_off" if "offload_off" in ANALYSES_IDS else ANALYSES_IDS[0]
    page = tmp_path / f"{name}.report.html"
    page.write_text(render_case(name), encoding="utf-8")
    cdp = CDP(browser, tmp_path)
    try:
        session = _open_page(cdp, page.resolve().as_uri(), width=width)
        boxes = _eval(cdp, session, CHANGE_BOX_LAYOUT)
        assert boxes, "no CHANGE boxes in the report"
        for b in boxes:
            assert b["whiteSpace"] in ("pre-wrap", "break-spaces"), b
            assert b["overflowWrap"] in ("anywhere", "break-word") or b["wordBreak"] == "break-all", b
            assert b["scroll"] <= b["client"] + 1, f"the box scrolls sideways instead of wrapping: {b}"
            assert b["glyphs"] > 0 and b["overlaps"] == 0, f"the Copy button covers code: {b}"
        _screenshot(cdp, session, tmp_path / f"change-boxes-{width}.png", full=True)
    finally:
        cdp.close()
