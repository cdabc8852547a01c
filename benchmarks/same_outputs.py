"""Every output of every fixture, written by one checkout and compared with another's: the check
that a move or a rename changed no behaviour.

    python benchmarks/same_outputs.py write OUT [--src SRC]   # write every output into OUT
    python benchmarks/same_outputs.py diff A B                # exit 1 and name each file that differs

`write` runs `python -m frtrace` (from SRC, default this checkout's src/) on each fixture folder
that holds an expected.json, asking for the text report, --json, -o, --chrome-trace, --html,
--sqlite and --stats, with -v. Run it with the old and the new code, then `diff`. A database
pickle that differs also says whether its tables hold the same rows (a change of which objects
the pickle shares, its size in stderr.txt with it, changes bytes, not rows); it still differs.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import pickle
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


def _same_rows(a: Path, b: Path) -> str:
    """' (same rows)' where two database pickles (both this checkout's own outputs) hold equal tables."""
    if not (a.exists() and b.exists()):
        return ""
    sys.path.insert(0, str(ROOT / "src"))  # the pickles name frtrace's table classes
    with open(a, "rb") as one, open(b, "rb") as other:
        (types_a, db_a), (types_b, db_b) = pickle.load(one), pickle.load(other)
    same = types_a == types_b and all([tuple(row) for row in getattr(db_a, table)] == [tuple(row) for row in getattr(db_b, table)]
                                      for table in db_a._fields)
    return " (same rows)" if same else " (other rows)"


def diff(a: Path, b: Path) -> int:
    names_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    names_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    different = sorted(names_a ^ names_b) + sorted(n for n in names_a & names_b if not filecmp.cmp(a / n, b / n, shallow=False))
    for name in different:
        print(f"differs: {name}{_same_rows(a / name, b / name) if name.name == 'db.pkl' else ''}")
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
    try:
        sys.exit(main())
    except BrokenPipeError:  # a reader that stopped early (| head): the rest is not wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's own flush at exit would raise again
        sys.exit(1)
