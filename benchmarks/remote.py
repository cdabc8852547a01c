"""frtrace -d on a dump set read from a loopback S3 server (moto's server mode) against the same
files read from a local folder: wall and CPU (frtrace's process and its workers), runs alternated
pair by pair in one run, so that the machine's noise falls on both.

    python benchmarks/remote.py [--ranks 1024] [--entries 2000] [--runs 3]

Needs the test extra (s3fs, moto[server]); the set is SYNTHETIC (benchmarks/generate.py, a skip
fault), uploaded once. The verdicts of the two reads must be the same, or it exits 1.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import remote_servers  # noqa: E402


def timed(argv: list[str], env: dict) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the process and its children, the first line it printed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, (done.stdout.splitlines() or [done.stderr.strip()])[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="frtrace-bench-remote-") as scratch:
        folder = Path(scratch) / "set"
        subprocess.run([sys.executable, str(HERE / "generate.py"), str(folder), "--ranks", str(args.ranks),
                        "--entries", str(args.entries), "--fault", "skip"], check=True, capture_output=True)
        files = sorted(p for p in folder.rglob("*") if p.is_file())
        size = sum(p.stat().st_size for p in files)
        server = remote_servers.start_s3_server()
        try:
            server.make_bucket("bench")
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda p: server.client.put_object(Bucket="bench", Key=f"set/{p.relative_to(folder).as_posix()}",
                                                                 Body=p.read_bytes()), files))
            env = server.child_env()
            command = [sys.executable, "-m", "frtrace", "-d"]
            rows = {"local": [], "s3": []}
            for _ in range(args.runs):
                rows["local"].append(timed([*command, str(folder)], env))
                rows["s3"].append(timed([*command, "s3://bench/set"], env))
        finally:
            server.stop()
    print(f"{args.ranks} ranks x {args.entries} entries, {len(files)} files, {size / 2**20:.0f} MiB; "
          f"{args.runs} runs each, alternated; CPU = frtrace's process and its workers")
    for name, runs in rows.items():
        walls, cpus = [w for w, _, _ in runs], [c for _, c, _ in runs]
        print(f"  {name:5}  wall {min(walls):6.2f}-{max(walls):6.2f} s   CPU {min(cpus):6.2f}-{max(cpus):6.2f} s")
    ratios = [s[0] / l[0] for l, s in zip(rows["local"], rows["s3"])]
    print(f"  s3 / local wall, pair by pair: {', '.join(f'{r:.2f}' for r in ratios)}")
    heads = {line for runs in rows.values() for _, _, line in runs}
    print(f"  first line: {sorted(heads)[0]}")
    return 0 if len(heads) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
