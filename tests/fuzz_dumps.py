"""Fuzz frtrace with mutated copies of the real fixture dumps, in folders and in archives.

    python tests/fuzz_dumps.py --iterations 10000 [--seed 0] [--work DIR] [--archives 0.5]

Each iteration copies one real fixture folder, damages one or two of its dump files (bit flips, a
truncation, a splice of two files, a swapped pickle opcode, an opcode argument set to its largest
value), and runs frtrace on it in a forked child with a time cap. A share of the iterations
(--archives) packs the folder into a .tar, .tar.gz, .tar.bz2, .tar.xz or .zip first and damages
the archive too (bit flips, a truncation, a member added twice, an archive added inside it), and
runs frtrace on the archive. It fails on: a crash signal, a time-out, an exit status other than 0,
1 or 2, a traceback or an internal error on stderr, a control character on stdout or stderr,
peak memory over the cap, any change to the input, or a temporary file left behind. Prints a
summary and exits 1 on the first failure, with the damaged input kept.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import pickletools
import random
import resource
import shutil
import signal
import sys
import tarfile
import tempfile
import time
import warnings
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))

FIXTURES = ROOT / "fixtures"
MUTATIONS = ("bit_flips", "truncate", "splice", "opcode_swap", "huge_argument")
ARCHIVE_FORMATS = ("tar", "tar.gz", "tar.bz2", "tar.xz", "zip")
ARCHIVE_MUTATIONS = ("bit_flips", "truncate", "duplicate_member", "nested_archive", "none")
MEMORY_CAP_MIB = 500
TIME_CAP_S = 30
_OPCODES = [op.code.encode("latin-1") for op in pickletools.opcodes]


def real_fixtures() -> list[Path]:
    """Folders of dumps written by real PyTorch (not the synthetic ones)."""
    return sorted(p.parent for p in FIXTURES.glob("*/expected.json") if not p.parent.name.startswith("synthetic_"))


def dump_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name != "expected.json" and not p.name.endswith(".stacks"))


def _opcode_positions(data: bytes) -> list[tuple[int, object]]:
    try:
        return [(pos, op) for op, _, pos in pickletools.genops(io.BytesIO(data))]
    except Exception:  # already damaged, or JSON: no opcode boundaries to use
        return []


def mutate(data: bytes, other: bytes, kind: str, rng: random.Random) -> bytes:
    if not data:
        return data
    if kind == "bit_flips":
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            position = rng.randrange(len(damaged))
            damaged[position] ^= 1 << rng.randrange(8)
        return bytes(damaged)
    if kind == "truncate":
        return data[:rng.randrange(len(data))]
    if kind == "splice":
        return data[:rng.randrange(len(data))] + other[rng.randrange(len(other)) if other else 0:]
    positions = _opcode_positions(data)
    if not positions:
        return mutate(data, other, "bit_flips", rng)
    position, opcode = rng.choice(positions)
    if kind == "opcode_swap":
        return data[:position] + rng.choice(_OPCODES) + data[position + 1:]
    # huge_argument: the opcode's fixed-size argument set to all ones (a memo index, a length, an int)
    width = opcode.arg.n if opcode.arg is not None and opcode.arg.n > 0 else 0
    if not width:
        return data[:position] + rng.choice(_OPCODES) + data[position + 1:]
    return data[:position + 1] + b"\xff" * width + data[position + 1 + width:]


def fingerprint(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file under the folder (a stacks/ folder's too): its mode and its bytes' hash."""
    return {str(p.relative_to(folder)): (p.stat().st_mode, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def pack(folder: Path, archive: Path, fmt: str, extra: list[tuple[str, bytes]] = ()) -> Path:
    """The folder's files packed under `dumps/` (and the extra members after them)."""
    members = [(f"dumps/{p.name}", p.read_bytes()) for p in sorted(folder.iterdir()) if p.is_file()] + list(extra)
    if fmt == "zip":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a duplicate name is one of the mutations
            with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as packed:
                for name, data in members:
                    packed.writestr(name, data)
        return archive
    with tarfile.open(archive, "w" if fmt == "tar" else f"w:{fmt.split('.')[1]}") as packed:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            packed.addfile(info, io.BytesIO(data))
    return archive


def archived(folder: Path, target: Path, kind: str, rng: random.Random) -> Path:
    """`folder` packed in a random format under `target`'s name, damaged by `kind`."""
    fmt = rng.choice(ARCHIVE_FORMATS)
    files = [p for p in sorted(folder.iterdir()) if p.is_file()]
    extra: list[tuple[str, bytes]] = []
    if kind == "duplicate_member" and files:
        twice = rng.choice(files)
        extra.append((f"dumps/{twice.name}", rng.choice(files).read_bytes()))
    if kind == "nested_archive" and files:
        inner = pack(folder, folder.parent / "inner.archive", rng.choice(ARCHIVE_FORMATS))
        extra.append((rng.choice(["dumps/inner.zip", f"dumps/{rng.choice(files).name}", "dumps/nccl_trace_rank_99"]),
                      inner.read_bytes()))
        inner.unlink()
    archive = pack(folder, target.with_name(f"{target.name}.{fmt}"), fmt, extra)
    if kind in ("bit_flips", "truncate"):
        archive.write_bytes(mutate(archive.read_bytes(), b"", kind, rng))
    return archive


def run_once(folder: Path, out: Path, temp: Path | None = None) -> dict:
    """frtrace on `folder` (or an archive) in a forked child: exit status or signal, output, peak
    RSS (MiB). `temp`: the child's temporary folder (what an archive is unpacked into)."""
    from frtrace.cli import main

    stdout, stderr, peak_file = out / "stdout", out / "stderr", out / "peak"
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: frtrace as a user would run it, under a time cap
        code = 70
        try:
            import faulthandler
            faulthandler.disable()  # a crash is reported by its signal, not by a stack dump of the fuzzer
            signal.alarm(TIME_CAP_S)
            if temp is not None:
                tempfile.tempdir = str(temp)
            with open(stdout, "w") as o, open(stderr, "w") as e:
                os.dup2(o.fileno(), 1)
                os.dup2(e.fileno(), 2)
                sys.stdout, sys.stderr = o, e  # under pytest they are capture objects, not fds 1 and 2
                code = main(["-d", str(folder), "-o", str(out / "db.pkl"), "--json", str(out / "r.json"), "--jobs", "1"])
                sys.stdout.flush()
                sys.stderr.flush()
            peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
            peak_file.write_text(str(peak / 1024))
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return {
        "status": status,
        "seconds": time.monotonic() - started,
        "stdout": stdout.read_text(errors="replace"),
        "stderr": stderr.read_text(errors="replace"),
        "peak_mib": float(peak_file.read_text()) if peak_file.exists() else None,
    }


def problems_of(result: dict, before: dict, after: dict, left: list[str] = ()) -> list[str]:
    status = result["status"]
    found = []
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        found.append("time-out" if sig == signal.SIGALRM else f"killed by signal {signal.Signals(sig).name}")
    elif os.WEXITSTATUS(status) not in (0, 1, 2):
        found.append(f"exit status {os.WEXITSTATUS(status)}")
    if "Traceback" in result["stderr"] or "internal error" in result["stderr"]:
        found.append("traceback or internal error on stderr")
    if any(c in result["stdout"] + result["stderr"] for c in "\x1b\x07\r\x00"):
        found.append("a control character reached the terminal")
    if result["peak_mib"] is not None and result["peak_mib"] > MEMORY_CAP_MIB:
        found.append(f"peak memory {result['peak_mib']:.0f} MiB")
    if before != after:
        found.append("the input changed")
    if left:
        found.append(f"left behind in the temporary folder: {', '.join(left[:3])}")
    return found


def fuzz(iterations: int, seed: int, work: Path, report=print, archives: float = 0.0) -> dict:
    """Run the iterations, a share `archives` of them on archives; returns the counts. Raises
    AssertionError naming the first failure."""
    rng = random.Random(seed)
    sources = real_fixtures()
    counts = {"iterations": 0, "exit": {0: 0, 1: 0, 2: 0}, "by_mutation": dict.fromkeys(MUTATIONS, 0),
              "by_archive_mutation": dict.fromkeys(ARCHIVE_MUTATIONS, 0)}
    peak, slowest = 0.0, 0.0
    for i in range(iterations):
        source = rng.choice(sources)
        case = work / f"case{i}"
        shutil.copytree(source, case / "dumps")
        files = dump_files(case / "dumps")
        for _ in range(rng.choice((1, 1, 1, 2))):
            victim, donor = rng.choice(files), rng.choice(files)
            kind = rng.choice(MUTATIONS)
            victim.write_bytes(mutate(victim.read_bytes(), donor.read_bytes(), kind, rng))
            counts["by_mutation"][kind] += 1
        (case / "out").mkdir()
        (case / "tmp").mkdir()
        target = case / "dumps"
        if rng.random() < archives:
            kind = rng.choice(ARCHIVE_MUTATIONS)
            (case / "input").mkdir()
            target = archived(case / "dumps", case / "input" / "dumps", kind, rng)
            counts["by_archive_mutation"][kind] += 1
        given = target if target.is_dir() else target.parent  # the folder, or the one holding the archive
        before = fingerprint(given)
        result = run_once(target, case / "out", case / "tmp")
        found = problems_of(result, before, fingerprint(given), os.listdir(case / "tmp"))
        if found:
            raise AssertionError(f"iteration {i} (seed {seed}, from {source.name}): {'; '.join(found)}; "
                                 f"case kept in {case}\n{result['stderr'][-2000:]}")
        counts["exit"][os.WEXITSTATUS(result["status"])] += 1
        peak = max(peak, result["peak_mib"] or 0.0)
        slowest = max(slowest, result["seconds"])
        counts["iterations"] += 1
        shutil.rmtree(case)
        if report and (i + 1) % 1000 == 0:
            report(f"{i + 1} iterations, peak {peak:.0f} MiB, slowest {slowest:.2f} s")
    counts["peak_mib"], counts["slowest_s"] = round(peak, 1), round(slowest, 2)
    return counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", help="folder for the damaged copies (default: a new temporary folder)")
    parser.add_argument("--archives", type=float, default=0.5, help="share of the iterations run on archives (default 0.5)")
    args = parser.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="frtrace-fuzz-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        counts = fuzz(args.iterations, args.seed, work, archives=args.archives)
    except AssertionError as exc:
        print(f"FAILED: {exc}")
        return 1
    elapsed = time.monotonic() - started
    print(f"{counts['iterations']} iterations in {elapsed:.0f} s, seed {args.seed}: no crash, no traceback, "
          f"no time-out, inputs unchanged, no temporary file left; exit 0/1/2: {counts['exit'][0]}/{counts['exit'][1]}/{counts['exit'][2]}; "
          f"peak memory of a run {counts['peak_mib']} MiB (cap {MEMORY_CAP_MIB}); slowest run {counts['slowest_s']} s; "
          f"mutations: {', '.join(f'{k} {v}' for k, v in counts['by_mutation'].items())}; archives: "
          f"{', '.join(f'{k} {v}' for k, v in counts['by_archive_mutation'].items())}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
