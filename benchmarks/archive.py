"""Reading a dump set from a .tar.gz (and a plain .tar) against the same files in a folder.

    python benchmarks/archive.py [--ranks 256] [--repeat 5] [--data bench-data]
    python benchmarks/archive.py --tiny 1000000 [--repeat 1] [--data bench-data]

Generates the set once (benchmarks/generate.py), packs it, then runs frtrace on the folder and the
archives, interleaved, and prints the median wall and CPU time and the median ratio to the folder
measured pair by pair. With --tiny N: one plain tar of N tiny dumps (a version and no entries,
46 bytes each, the headers written directly), timed alone: what an archive of a million members
costs frtrace beyond its dumps. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from timing import timed_frtrace  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data", default=str(HERE.parent / "bench-data"))
    parser.add_argument("--tiny", type=int, default=None, metavar="N", help="time one tar of N tiny dumps instead")
    args = parser.parse_args(argv)
    if args.tiny is not None:
        return tiny(Path(args.data), args.tiny, args.repeat)
    folder = Path(args.data) / f"archive-{args.ranks}"
    if not folder.exists():
        subprocess.run([sys.executable, str(HERE / "generate.py"), str(folder), "--ranks", str(args.ranks)], check=True)
    inputs = {"folder": folder}
    for suffix, mode in ((".tar.gz", "w:gz"), (".tar", "w")):
        packed = folder.with_name(folder.name + suffix)
        if not packed.exists():
            with tarfile.open(packed, mode) as archive:
                archive.add(folder, arcname=folder.name)
        inputs[suffix.lstrip(".")] = packed
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in inputs}
    for _ in range(args.repeat):
        for name, path in inputs.items():
            runs[name].append(timed_frtrace("-d", str(path)))
    print(f"{args.ranks} ranks, {args.repeat} interleaved runs each; {os.cpu_count()} cores")
    for name, times in runs.items():
        wall = statistics.median(w for w, _ in times)
        cpu = statistics.median(c for _, c in times)
        wall_ratio = statistics.median(a[0] / b[0] for a, b in zip(times, runs["folder"]))
        cpu_ratio = statistics.median(a[1] / b[1] for a, b in zip(times, runs["folder"]))
        print(f"{name:8} wall {wall:.2f} s  cpu {cpu:.2f} s  vs folder: wall {wall_ratio:.2f}x  cpu {cpu_ratio:.2f}x")
    return 0


_TINY = b'{"version":"2.10","pg_config":{},"entries":[]}'


def _header(name: bytes, size: int) -> bytes:
    """A ustar header of a regular member (what tarfile writes, without its per-member cost)."""
    block = bytearray(512)
    block[:len(name)] = name
    block[100:108], block[108:116], block[116:124] = b"0000644\0", b"0000000\0", b"0000000\0"
    block[124:136], block[136:148] = b"%011o\0" % size, b"00000000000\0"
    block[148:156], block[156:157], block[257:265] = b" " * 8, b"0", b"ustar\x0000"
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def tiny(data: Path, members: int, repeat: int) -> int:
    packed = data / f"tiny-{members}.tar"
    if not packed.exists():
        data.mkdir(parents=True, exist_ok=True)
        padding = bytes(-len(_TINY) % 512)
        with open(packed, "wb") as out:
            for rank in range(members):
                out.write(_header(b"dumps/trace_rank_%d" % rank, len(_TINY)) + _TINY + padding)
            out.write(bytes(1024))
    times = [timed_frtrace("-d", str(packed)) for _ in range(max(1, repeat))]
    print(f"{members} tiny dumps in one tar ({packed.stat().st_size >> 20} MiB); {os.cpu_count()} cores")
    for wall, cpu in times:
        print(f"wall {wall:.2f} s  cpu {cpu:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
