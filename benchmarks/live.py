"""frtrace live's costs: fetching from many debug-server workers at once, and the time from the
command to the verdict on a real hanging job.

    python benchmarks/live.py fetch [--workers 1024]     # simulated workers, one process on loopback
    python benchmarks/live.py job [--ranks 8]            # a real gloo job (needs torch), rank 2 hangs

`fetch` serves a real gloo JSON dump (fixtures/healthy_json) from N loopback HTTP servers in a
child process and times live.fetch.fetch_all over all of them (wall and this process's CPU).
`job` starts tests/livejob.py (skip) with N ranks and times `frtrace live --store` to its verdict,
with one snapshot and with two (--interval 3). A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

SERVE = r"""
import http.server, sys, threading
body = open(sys.argv[1], "rb").read()
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        if "dump_nccl_trace_json" in self.path:  # a CPU build: no NCCL recorder
            self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers(); return
        out = body if self.path.endswith("fr_trace_json") else b"Thread 0x1 (most recent call first):\n"
        self.send_response(200); self.send_header("Content-Length", str(len(out))); self.end_headers(); self.wfile.write(out)
    def log_message(self, *a): pass
ports = []
for _ in range(int(sys.argv[2])):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ports.append(server.server_address[1])
print(" ".join(map(str, ports)), flush=True)
sys.stdin.read()
"""


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def fetch(workers: int) -> None:
    from frtrace.live.fetch import fetch_all

    dump = ROOT / "fixtures" / "healthy_json" / "comm_lib_trace_rank_0.json"
    server = subprocess.Popen([sys.executable, "-c", SERVE, str(dump), str(workers)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        ports = server.stdout.readline().split()
        urls = {rank: f"http://127.0.0.1:{port}" for rank, port in enumerate(ports)}
        for _ in range(3):
            cpu, start = _cpu(), time.perf_counter()
            answers = fetch_all(urls, timeout=30)
            wall, cpu = time.perf_counter() - start, _cpu() - cpu
            failed = sum(a.error is not None for a in answers)
            print(f"fetch of {workers} workers ({dump.stat().st_size} B each): {wall:.2f} s wall, {cpu:.2f} s CPU, "
                  f"{failed} failed")
    finally:
        server.kill()


def job(ranks: int) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = subprocess.Popen([sys.executable, str(ROOT / "tests" / "livejob.py"), "skip", str(ranks), str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(20)  # every rank up, its worker in the store, the hang reached
        for extra in (["--interval", "0"], ["--interval", "3"]):
            out = Path(f"/tmp/frtrace-live-bench-{os.getpid()}-{extra[1]}")
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "frtrace", "live", "--store", f"127.0.0.1:{port}", "-O", str(out),
                                   *extra], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
            wall = time.perf_counter() - start
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            print(f"{ranks} ranks, {' '.join(extra)}: {wall:.2f} s wall to the verdict (children's CPU so far "
                  f"{usage.ru_utime + usage.ru_stime:.2f} s): {done.stdout.splitlines()[0][:100]}")
    finally:
        os.killpg(started.pid, 9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("fetch").add_argument("--workers", type=int, default=1024)
    sub.add_parser("job").add_argument("--ranks", type=int, default=8)
    args = parser.parse_args()
    fetch(args.workers) if args.what == "fetch" else job(args.ranks)


if __name__ == "__main__":
    main()
