"""Screenshots of the documentation site as a reader sees it, and a check that no code is cut off.

Builds the site (or takes a built one), serves it on localhost, opens its key pages in headless
Chromium at a desktop width (1400 px) and a phone width (390 px), saves a PNG of each page's
first screen, and measures every code block, diagram and table in that first screen: one whose
content is wider than its box (``scrollWidth > clientWidth``) is cut off, and the script exits 1
naming it.

    python scripts/site_screenshots.py --out /tmp/screens
    python scripts/site_screenshots.py --site site/ --out /tmp/screens --full-page

Needs Chromium (``apt-get install chromium``, or ``--chromium PATH``); it is driven over the
DevTools protocol on a pipe, so nothing beyond the standard library is imported. The site's
diagrams are drawn by Mermaid, which Material loads from a CDN; where the CDN cannot be
reached, ``--mermaid FILE`` (a ``mermaid.min.js``) is served in its place, and without it the
script fetches Mermaid 11 once with ``npm pack`` into the user's cache. Not part of CI: it needs
a browser.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: The pages a newcomer reads first, by their path in the built site.
PAGES = {
    "home": "",
    "getting-started": "getting-started/",
    "tutorial": "tutorial/",
    "device-page": "devices/musa/",
    "devices-index": "devices/",
    "spec-reference": "reference/specs/",
    "api-page": "api/stratlib/",
}
#: (name, width, height, mobile): a laptop's window and a phone's screen.
SCREENS = [("desktop", 1400, 900, False), ("phone", 390, 844, True)]
MERMAID_CDN = "*unpkg.com/mermaid@*"
MERMAID_PACKAGE = "mermaid@11"

#: What is cut off in the first screen: code blocks, diagrams and tables whose content is wider
#: than their box. Tables scroll sideways on a phone by design (Material wraps them in a
#: scrolling box), so there only code and diagrams count.
MEASURE = """
((whole) => {
  const height = whole ? Infinity : window.innerHeight;
  const phone = window.innerWidth < 600, found = [];
  const kinds = [["code", ".md-content pre > code"], ["diagram", ".md-content .mermaid"]];
  if (!phone) kinds.push(["table", ".md-content .md-typeset__scrollwrap"]);
  for (const [kind, selector] of kinds) {
    for (const el of document.querySelectorAll(selector)) {
      const box = el.getBoundingClientRect();
      if (box.top >= height || box.bottom <= 0 || box.width === 0) continue;
      if (!el.checkVisibility()) continue;  // inside a collapsed note
      if (el.scrollWidth > el.clientWidth + 1) {
        found.push({kind, over: el.scrollWidth - el.clientWidth,
                    text: el.textContent.trim().split("\\n")[0].slice(0, 70)});
      }
    }
  }
  return JSON.stringify(found);
})(%s)
"""
#: Ready when the fonts have loaded and no diagram is still waiting for Mermaid.
READY = """
document.readyState === "complete" && document.fonts.status === "loaded" &&
  !document.querySelector("pre.mermaid, div.mermaid:not([data-processed]) > code")
"""


class Chromium:
    """Headless Chromium driven over the DevTools protocol on a pipe (fds 3 and 4)."""

    def __init__(self, executable: str, profile: Path) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()

        def fds() -> None:  # in the child: the protocol's pipe on fds 3 (in) and 4 (out)
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        flags = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            "--remote-debugging-pipe",
            "about:blank",
        ]
        self.process = subprocess.Popen(
            [executable, *flags],
            preexec_fn=fds,
            # kept open past the child's closing of every other descriptor, which follows the
            # preexec function
            pass_fds=(3, 4),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._out = os.fdopen(to_child_w, "wb", buffering=0)
        self._in = os.fdopen(from_child_r, "rb", buffering=0)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = self._in.read(1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return dict(json.loads(message))

    def send(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        request: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            request["sessionId"] = session
        self._out.write(json.dumps(request).encode() + b"\0")
        while True:
            message = self._read()
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))
            self.events.append(message)

    def wait_event(self, method: str, timeout: float) -> None:
        """Until an event named ``method`` (answering paused requests as they come)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while self.events:
                event = self.events.pop(0)
                if event.get("method") == method:
                    return
                self.handle(event)
            self.events.append(self._read())
        raise TimeoutError(method)

    def handle(self, event: dict[str, Any]) -> None:
        """Overridden per page: answers requests the page paused on."""

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.send("Browser.close")
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


class Page:
    """One tab: a viewport, navigation, evaluation, screenshots; serves Mermaid locally."""

    def __init__(self, browser: Chromium, mermaid: bytes | None) -> None:
        self.browser = browser
        target = browser.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = browser.send("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.mermaid = mermaid
        browser.handle = self._handle  # type: ignore[method-assign]
        self.send("Page.enable")
        self.send("Runtime.enable")
        if mermaid is not None:
            self.send("Fetch.enable", patterns=[{"urlPattern": MERMAID_CDN}])

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        return self.browser.send(method, self.session, **params)

    def _handle(self, event: dict[str, Any]) -> None:
        if event.get("method") == "Fetch.requestPaused" and self.mermaid is not None:
            self.send(
                "Fetch.fulfillRequest",
                requestId=event["params"]["requestId"],
                responseCode=200,
                responseHeaders=[{"name": "Content-Type", "value": "text/javascript"}],
                body=base64.b64encode(self.mermaid).decode(),
            )

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def open(self, url: str, width: int, height: int, mobile: bool) -> None:
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=mobile,
        )
        self.send("Page.navigate", url=url)
        self.browser.wait_event("Page.loadEventFired", timeout=30)
        deadline = time.monotonic() + 10
        while not self.evaluate(READY) and time.monotonic() < deadline:
            self._pump(0.1)
        self._pump(0.3)  # the last layout after the diagrams are drawn

    def _pump(self, seconds: float) -> None:
        """Let the page run for a moment, answering its paused requests."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.evaluate("0")
            while self.browser.events:
                self._handle(self.browser.events.pop(0))
            time.sleep(0.05)

    def screenshot(self, path: Path, full_page: bool) -> list[Path]:
        """The first screen as ``path``; with ``full_page``, the whole page in tiles of a
        screen's height each (``name-1.png``, ``name-2.png``, ...) after it."""
        shots = [path]
        path.write_bytes(self._capture({"format": "png"}))
        if full_page:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            width, height = int(size["width"]), int(size["height"])
            screen = int(self.evaluate("window.innerHeight"))
            for number, top in enumerate(range(0, height, screen), start=1):
                clip = {"x": 0, "y": top, "width": width, "scale": 1}
                clip["height"] = min(screen, height - top)
                tile = path.with_name(f"{path.stem}-{number}{path.suffix}")
                tile.write_bytes(
                    self._capture({"format": "png", "captureBeyondViewport": True, "clip": clip})
                )
                shots.append(tile)
        return shots

    def _capture(self, params: dict[str, Any]) -> bytes:
        return base64.b64decode(self.send("Page.captureScreenshot", **params)["data"])


def mermaid_script(given: Path | None) -> bytes | None:
    """Mermaid's script to serve in place of the CDN's: the file given, else one fetched once
    with npm into the user's cache; None where neither is there (diagrams stay text)."""
    if given is not None:
        return given.read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "stratgen-docs"
    script = cache / "mermaid.min.js"
    if not script.exists() and shutil.which("npm"):
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as folder:
            done = subprocess.run(
                ["npm", "pack", MERMAID_PACKAGE, "--pack-destination", folder, "--silent"],
                capture_output=True,
                text=True,
                check=False,
            )
            packed = list(Path(folder).glob("mermaid-*.tgz"))
            if done.returncode == 0 and packed:
                with tarfile.open(packed[0]) as archive:
                    member = archive.extractfile("package/dist/mermaid.min.js")
                    if member is not None:
                        script.write_bytes(member.read())
    if not script.exists():
        print("no Mermaid script: the diagrams show as their source", file=sys.stderr)
        return None
    return script.read_bytes()


@contextlib.contextmanager
def served(site: Path) -> Iterator[str]:
    """The built site on an HTTP server on localhost, for as long as the block runs."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()


def build_site(into: Path) -> None:
    """The site, built strictly as CI builds it (scripts/docs.py)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "docs.py"), "build", "--site-dir", str(into)],
        cwd=ROOT,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"site_screenshots: the site did not build (exit {done.returncode})")


def _every_page(site: Path) -> dict[str, str]:
    """Every page of the built site, by a name made of its path."""
    pages = {}
    for path in sorted(site.rglob("index.html")):
        address = path.parent.relative_to(site).as_posix()
        if address != "." and not address.startswith(("search", "assets")):
            pages[address.replace("/", "-")] = address + "/"
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, help="a built site (default: build one)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the PNG files")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    parser.add_argument("--mermaid", type=Path, help="a mermaid.min.js to serve for the CDN's")
    parser.add_argument(
        "--full-page", action="store_true", help="whole pages too, in tiles of a screen each"
    )
    parser.add_argument("--page", action="append", choices=sorted(PAGES), help="only these")
    parser.add_argument(
        "--every-page",
        action="store_true",
        help="measure every page of the site, whole (no screenshots but the key pages')",
    )
    args = parser.parse_args(argv)
    if not shutil.which(args.chromium):
        print(f"site_screenshots: no Chromium at {args.chromium!r}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    mermaid = mermaid_script(args.mermaid)
    with tempfile.TemporaryDirectory() as scratch:
        site = args.site
        if site is None:
            site = Path(scratch) / "site"
            build_site(site)
        cut_off = []
        with served(site) as base:
            browser = Chromium(args.chromium, Path(scratch) / "profile")
            try:
                page = Page(browser, mermaid)
                pages = dict(PAGES) if not args.page else {n: PAGES[n] for n in args.page}
                if args.every_page:
                    pages.update(_every_page(site))
                for name, address in pages.items():
                    for screen, width, height, mobile in SCREENS:
                        page.open(base + address, width, height, mobile)
                        shot = args.out / f"{name}-{width}.png"
                        if name in PAGES:
                            page.screenshot(shot, args.full_page)
                        whole = "true" if args.every_page else "false"
                        found = json.loads(page.evaluate(MEASURE % whole))
                        status = "ok" if not found else f"{len(found)} cut off"
                        print(f"{shot}  {screen}: {status}")
                        for item in found:
                            print(f"    {item['kind']}, {item['over']} px too wide: {item['text']}")
                            cut_off.append((name, screen, item))
            finally:
                browser.close()
    if cut_off:
        print(f"site_screenshots: {len(cut_off)} cut off in the first screen", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
