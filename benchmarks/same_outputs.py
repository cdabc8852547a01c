"""Every output of every fixture, written by one checkout and compared with another's: the check
that a move or a rename changed no behaviour.

    python benchmarks/same_outputs.py write OUT [--src SRC]   # write every output into OUT
    python benchmarks/same_outputs.py diff A B                # exit 1 and name each file that differs

`write` runs `python -m frtrace` (from SRC, default this checkout's src/) on each fixture folder
that holds an expected.json, asking for the text report, --json, -o, --chrome-trace, --html,
--sqlite and --stats, with -v. Run it with the old and the new code, then `diff`.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def fixtures() -> list[Path]:
    return sorted(p.parent for p in FIXTURES.rglob("expected.json"))


def write(out: Path, src: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(src)}
    for folder in fixtures():
        name = str(folder.relative_to(FIXTURES)).replace(os.sep, "__")
        target = out / name
        target.mkdir(parents=True, exist_ok=True)
        args = ["-d", str(folder), "--json", str(target / "report.json"), "-o", str(target / "db.pkl"),
                "--chrome-trace", str(target / "trace.json"), "--html", str(target / "report.html"),
                "--sqlite", str(target / "db.sqlite"), "--stats", "-v"]
        run = subprocess.run([sys.executable, "-m", "frtrace", *args], capture_output=True, env=env, cwd=ROOT)
        (target / "stdout.txt").write_bytes(run.stdout)
        said = run.stderr.replace(str(target).encode(), b"OUT")  # "frtrace: wrote OUT/db.pkl ...", whatever OUT is
        (target / "stderr.txt").write_bytes(said + f"\nexit {run.returncode}\n".encode())


def diff(a: Path, b: Path) -> int:
    names_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    names_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    different = sorted(names_a ^ names_b) + sorted(n for n in names_a & names_b if not filecmp.cmp(a / n, b / n, shallow=False))
    for name in different:
        print(f"differs: {name}")
    print(f"{len(names_a & names_b)} files compared, {len(different)} differ")
    return 1 if different else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("out", type=Path)
    w.add_argument("--src", type=Path, default=ROOT / "src")
    d = sub.add_parser("diff")
    d.add_argument("a", type=Path)
    d.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.command == "write":
        write(args.out, args.src)
        return 0
    return diff(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
