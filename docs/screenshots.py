"""Take the README's pictures the way a person sees them: in headless Chromium.

    apt-get install chromium              # Debian
    pip install websocket-client          # for this script only, not a frtrace dependency
    python docs/screenshots.py --catapult PATH/TO/catapult [--big DIR]

Writes docs/report.png (the HTML report of the 8-rank fixture), docs/timeline.png (its Chrome
trace, made viewable offline by catapult's trace2html, at the viewer's default zoom) and, with
--big (a 256-rank dump set from benchmarks/generate.py), docs/report-256.png.

The trace viewer imports a trace over many animation frames, which `chromium --screenshot` does
not wait for; so pages are driven through the DevTools protocol: load, let frames run for a
while, then capture. websocket-client talks that protocol better than code of ours would.
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
import shutil
from pathlib import Path

try:
    import websocket
except ImportError:  # said in one line with what to install, not as a ModuleNotFoundError
    websocket = None

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "skip_goes_on_rank5_of_8"
PORT = 9333


class Browser:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", f"--remote-debugging-port={PORT}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{PORT}/json"))
                break
            except OSError:
                time.sleep(0.2)
        else:
            raise SystemExit("chromium did not start")
        page = next(p for p in pages if p["type"] == "page")
        self.socket = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=120)
        self.calls = 0

    def call(self, method: str, **params) -> dict:
        self.calls += 1
        self.socket.send(json.dumps({"id": self.calls, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.calls:
                return message.get("result", {})

    def shoot(self, url: str, out: Path, width: int, height: int, settle: float) -> None:
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        self.call("Page.navigate", url=url)
        deadline = time.time() + settle
        while time.time() < deadline:  # each capture lets the page draw a frame
            time.sleep(0.5)
            self.call("Page.captureScreenshot")
        out.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        print(f"wrote {out}")

    def close(self) -> None:
        self.process.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--catapult", type=Path, required=True, help="a checkout of github.com/catapult-project/catapult")
    parser.add_argument("--big", type=Path, help="a 256-rank dump set (benchmarks/generate.py --fault skip)")
    args = parser.parse_args()
    needs = ([] if websocket is not None else ["websocket-client (pip install websocket-client)"]) + \
            ([] if shutil.which("chromium") else ["chromium (apt-get install chromium)"])
    if needs:
        sys.exit(f"docs/screenshots.py needs {' and '.join(needs)}; nothing was made")
    work = Path(tempfile.mkdtemp())
    frtrace = [sys.executable, "-m", "frtrace"]
    subprocess.run([*frtrace, "-d", str(FIXTURE), "--html", str(work / "report.html"), "--chrome-trace",
                    str(work / "trace.json")], stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, str(args.catapult / "tracing" / "bin" / "trace2html"), str(work / "trace.json"),
                    "--output", str(work / "trace.html")], check=True, stdout=subprocess.DEVNULL)
    browser = Browser()
    try:
        browser.shoot((work / "report.html").as_uri(), ROOT / "docs" / "report.png", 1280, 1000, 2)
        browser.shoot((work / "trace.html").as_uri(), ROOT / "docs" / "timeline.png", 1600, 900, 25)
        if args.big:
            subprocess.run([*frtrace, "-d", str(args.big), "--html", str(work / "big.html")], stdout=subprocess.DEVNULL)
            browser.shoot((work / "big.html").as_uri(), ROOT / "docs" / "report-256.png", 1280, 1000, 2)
    finally:
        browser.close()


if __name__ == "__main__":
    main()
