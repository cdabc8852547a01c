"""Writing outputs (outputs/commit.py) on the inputs the mutation run's survivors named and no
test built in this process (the store tests of test_remote.py start frtrace as a process, where
no mutant is seen): a JSON report and a database written to S3 whole, their contents those of
the same outputs written here; an output under the dump URL that is a dump's object, or named as
a rank's dump would be, refused; one under it with another name written; an upload that fails
midway said in the store's words; a written output's size in words; a disk that fills while an
output is staged, and a folder that takes no new file, each said with what to do; an output that
is the dump folder itself; a replaced output's owner kept; outputs checked against each other
after one sent to /dev/null; a small dump whose parsing runs out of memory, and a damaged dump in
the store (reading/safe_read.py), said as such and named by its URL.

Real fixtures (fixtures/skip_goes_on), in moto's S3 server (tests/remote_servers.py, on
loopback) for the store; the full disk and the read-only folder are simulated (SYNTHETIC
failures: os.fsync raising ENOSPC, tempfile.mkstemp raising EROFS in the report's folder)."""

from __future__ import annotations

import json
import os
import pickle
import tempfile
from pathlib import Path

import pytest
from remote_servers import s3_env, s3_server  # noqa: F401 - pytest fixtures

pytest.importorskip("s3fs", reason="writing to S3 needs s3fs (the test extra installs it)")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
DUMPS = "s3://safety/jobs/skip_goes_on"


@pytest.fixture
def store(s3_env):  # noqa: F811
    s3_env.upload(FIXTURES / "skip_goes_on", "safety", "jobs/skip_goes_on")
    return s3_env


def _object(store, key: str) -> bytes:
    return store.client.get_object(Bucket="safety", Key=key)["Body"].read()


def _failed_write(code: int, capsys) -> str:
    """The one line saying an output could not be written, of a run that exited 2 for it."""
    err = capsys.readouterr().err
    assert code == 2, err
    (line,) = [line for line in err.splitlines() if "cannot write" in line]
    return line


def _keys(store, prefix: str) -> list[str]:
    return [o["Key"] for o in store.client.list_objects_v2(Bucket="safety", Prefix=prefix).get("Contents", [])]


def test_a_json_report_and_a_database_written_to_the_store_hold_what_they_hold_written_here(store, tmp_path, capsys):
    from frtrace.cli import main

    here = tmp_path / "r.json"
    assert main(["-d", str(FIXTURES / "skip_goes_on"), "--json", str(here), "--jobs", "1"]) == 1
    code = main(["-d", str(FIXTURES / "skip_goes_on"), "--json", "s3://safety/out/r.json", "-o", "s3://safety/out/db.pkl",
                 "--jobs", "1"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "frtrace: wrote s3://safety/out/db.pkl (" in err
    assert sorted(_keys(store, "out/")) == ["out/db.pkl", "out/r.json"]
    written, local = json.loads(_object(store, "out/r.json")), json.loads(here.read_text())
    assert (written["headline"], written["culprit_ranks"]) == (local["headline"], local["culprit_ranks"]) == (local["headline"], [1])
    _, db = pickle.loads(_object(store, "out/db.pkl"))
    assert {r for f in db.findings if f.root_cause for r in f.ranks} == {1}
    assert not list(Path.cwd().glob("XX*"))


@pytest.mark.parametrize("name, slash", [("trace_host-node00_0", ""), ("trace_host-node00_9", ""), ("trace_host-node00_9", "/")],
                         ids=["a-dump-of-the-set", "named-as-a-dump", "named-as-a-dump-under-a-url-ending-in-a-slash"])
def test_an_output_under_the_dump_url_that_is_or_would_be_a_dump_is_refused(store, name, slash, capsys):
    """trace_host-node00_0 is rank 0's dump in the set; trace_host-node00_9 none, but named as a
    rank's dump would be, in the set's folder (given with or without a slash at its end)."""
    from frtrace.cli import main

    before = _keys(store, "jobs/skip_goes_on/")
    assert main(["-d", DUMPS + slash, "--json", f"{DUMPS}/{name}", "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert f"that is an object of the dump set {DUMPS}{slash}; frtrace never writes over its input" in err, err
    assert _keys(store, "jobs/skip_goes_on/") == before


@pytest.mark.parametrize("dumps", [DUMPS, DUMPS + "/"], ids=["dump-url", "dump-url-with-a-slash"])
def test_an_output_under_the_dump_url_with_a_name_no_dump_has_is_written(store, dumps, capsys):
    from frtrace.cli import main

    assert main(["-d", dumps, "--json", f"{DUMPS}/report.json", "--jobs", "1"]) == 1, capsys.readouterr().err
    assert json.loads(_object(store, "jobs/skip_goes_on/report.json"))["culprit_ranks"] == [1]
    store.client.delete_object(Bucket="safety", Key="jobs/skip_goes_on/report.json")


def test_an_output_to_the_store_is_staged_in_the_systems_temporary_folder_not_the_working_one(store, tmp_path, monkeypatch):
    """The working directory may be the dump folder: a store output's unnamed file is made where
    a stream's is, in the system's temporary folder."""
    from frtrace.cli import main
    from frtrace.outputs import commit

    staged = []
    real_stage = commit.Outputs.stage

    def stage(self, flag, write):
        real_stage(self, flag, write)
        staged.append(os.readlink(f"/proc/self/fd/{self.staged[-1][1]}"))

    monkeypatch.setattr(commit.Outputs, "stage", stage)
    monkeypatch.chdir(tmp_path)
    assert main(["-d", str(FIXTURES / "skip_goes_on"), "--json", "s3://safety/staged/r.json", "--jobs", "1"]) == 1
    (where,) = staged
    assert os.path.dirname(where) == tempfile.gettempdir() and where.endswith(" (deleted)"), where
    assert json.loads(_object(store, "staged/r.json"))["culprit_ranks"] == [1]


def test_an_upload_that_fails_midway_says_what_the_store_answered_and_leaves_no_object(store, monkeypatch, capsys):
    """The connection is reset after the first 1,000 bytes: the write is thrown away, and the
    error says the store refused it, with the store's own words."""
    from frtrace.cli import main

    def fails_after_a_part(source, target, length=0):
        target.write(source.read(1000))
        raise ConnectionResetError(104, "Connection reset by peer")

    monkeypatch.setattr("frtrace.outputs.commit.shutil.copyfileobj", fails_after_a_part)
    code = main(["-d", str(FIXTURES / "skip_goes_on"), "--json", "s3://safety/half/r.json", "--jobs", "1"])
    monkeypatch.undo()
    line = _failed_write(code, capsys)
    # the output, what it is, the store's answer (the exception's type and words), and that nothing was written
    assert line == ("frtrace: s3://safety/half/r.json: cannot write the JSON report (the store refused it: "
                    "ConnectionResetError: [Errno 104] Connection reset by peer); no output file was written or changed"), line
    assert _keys(store, "half/") == []


@pytest.mark.parametrize("size, said", [
    (999, "999 bytes"), (1000, "1.0 kB"), (1234, "1.2 kB"), (10**6, "1.0 MB"), (1_500_000, "1.5 MB"), (9_700_000, "9.7 MB"),
    (10**9, "1.0 GB"), (1_500_000_000, "1.5 GB"), (25 * 10**9, "25.0 GB"),
])
def test_a_written_output_s_size_is_said_in_decimal_units_from_its_first_whole_one(size, said):
    """The size in `frtrace: wrote PATH (SIZE, the WHAT)`: decimal units (as ls -h --si), the
    largest of which the size holds one whole, to a tenth."""
    from frtrace.outputs.commit import _size_text

    assert _size_text(size) == said


def test_an_output_the_disk_has_no_room_for_says_to_free_some_space_and_nothing_is_written(tmp_path, monkeypatch, capsys):
    """The disk fills while the JSON report is staged (its flush to the disk fails, ENOSPC): the
    report is not written, the markdown asked beside it neither, and the message says what to do."""
    import errno
    import os

    from frtrace.cli import main

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("frtrace.outputs.commit.os.fsync", full)
    code = main(["-d", str(FIXTURES / "skip_goes_on"), "--json", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "r.md"),
                 "--jobs", "1"])
    monkeypatch.undo()
    line = _failed_write(code, capsys)
    assert line.startswith(f"frtrace: {tmp_path / 'r.json'}: cannot write the JSON report ({os.strerror(errno.ENOSPC)}); "
                           "choose another path or free some space"), line
    assert list(tmp_path.iterdir()) == []


def test_an_output_whose_folder_takes_no_new_file_says_to_choose_another_path(tmp_path, monkeypatch, capsys):
    """The report's folder refuses a new file (a read-only file system, EROFS, where no O_TMPFILE
    file can be made either): nothing is written, and the message says what to do."""
    import errno
    import os
    import tempfile

    from frtrace.cli import main

    real = tempfile.mkstemp

    def refused(*args, **kwargs):  # in the report's folder only
        if kwargs.get("dir") == str(tmp_path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real(*args, **kwargs)

    monkeypatch.delattr("frtrace.outputs.commit.os.O_TMPFILE")
    monkeypatch.setattr("frtrace.outputs.commit.tempfile.mkstemp", refused)
    code = main(["-d", str(FIXTURES / "skip_goes_on"), "--json", str(tmp_path / "r.json"), "--jobs", "1"])
    monkeypatch.undo()
    line = _failed_write(code, capsys)
    assert line.startswith(f"frtrace: {tmp_path / 'r.json'}: cannot write the JSON report ({os.strerror(errno.EROFS)}); "
                           "choose another path"), line
    assert "free some space" not in line and list(tmp_path.iterdir()) == []


def test_an_output_that_is_the_dump_folder_itself_is_said_to_be_a_folder(capsys):
    """`--json DUMP_FOLDER`: the folder is no file of itself; the output is refused as a directory."""
    from frtrace.cli import main

    folder = FIXTURES / "skip_goes_on"
    assert main(["-d", str(folder), "--json", str(folder), "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert f"{folder}: is a directory; give a file name for the JSON report" in err, err
    assert "never writes over its input" not in err


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a file to another owner needs root")
def test_a_replaced_output_keeps_its_owner(tmp_path, capsys):
    """An existing report owned by another user (uid and gid 12345) is replaced by one with the
    same owner (frtrace, running as root, may give it back)."""
    from frtrace.cli import main

    report = tmp_path / "r.json"
    report.write_text("{}")
    os.chown(report, 12345, 12345)
    assert main(["-d", str(FIXTURES / "skip_goes_on"), "--json", str(report), "--jobs", "1"]) == 1, capsys.readouterr().err
    assert json.loads(report.read_text())["culprit_ranks"] == [1]
    assert (report.stat().st_uid, report.stat().st_gid) == (12345, 12345)


def test_a_small_dump_whose_parsing_runs_out_of_memory_is_said_damaged_or_hostile(monkeypatch):
    """A dump of a few bytes cannot need gigabytes: where its parsing runs out of memory anyway
    (SYNTHETIC: the unpickler raises MemoryError), the file is said damaged or hostile, not one of
    too many entries, and left out."""
    from frtrace.errors import DumpError
    from frtrace.reading import safe_read

    def exhausted(self):
        raise MemoryError

    monkeypatch.setattr(safe_read._DataOnlyUnpickler, "load", exhausted)
    data = pickle.dumps({"version": "2.10", "entries": []}, protocol=2)
    with pytest.raises(DumpError) as raised:
        safe_read.parse_raw(data, "nccl_trace_rank_0")
    said = f"parsing it needs far more memory than a {len(data)}-byte dump can; the file is damaged or hostile, leave it out"
    assert (raised.value.path, raised.value.reason) == ("nccl_trace_rank_0", said)


def test_a_damaged_dump_in_the_store_is_named_by_its_url(store, capsys):
    """A dump object cut short in the store: the note that leaves it out names its URL."""
    from frtrace.cli import main

    whole = _object(store, "jobs/skip_goes_on/trace_host-node00_0")
    store.put("safety/cut/trace_host-node00_0", whole[: len(whole) // 2])
    for name in ("trace_host-node00_1", "trace_host-node01_2", "trace_host-node01_3"):
        store.put(f"safety/cut/{name}", _object(store, f"jobs/skip_goes_on/{name}"))
    main(["-d", "s3://safety/cut", "--jobs", "1"])
    err = capsys.readouterr()
    assert "s3://safety/cut/trace_host-node00_0: truncated pickle" in err.out + err.err, err


def test_two_outputs_naming_one_file_after_one_sent_to_dev_null_are_refused(tmp_path, capsys):
    """/dev/null takes any number of outputs; the outputs after it are still checked against each
    other: two naming one file are refused before anything is read."""
    from frtrace.cli import main

    same = tmp_path / "out"
    assert main(["-d", str(FIXTURES / "skip_goes_on"), "--json", "/dev/null", "--markdown", str(same), "-o", str(same),
                 "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert f"both name {same}; give them different files" in err, err
    assert not same.exists()
