"""`frtrace mcp --root DIR ...`: frtrace as an MCP server over stdio, for agents.

Built on the official MCP Python SDK (`pip install 'frtrace[mcp]'`). Tools:

- `analyze_dumps(path)`: a dump folder or archive; the JSON report (`frtrace schema`).
- `rank_entries(path, rank, group, seq=None, window=10)`: one rank's entries in one group (its
  name or desc), those within `window` of collective seq id `seq`, else its last 2 x window.
- `explain_finding(path, index=0)`: one finding of the report (root causes first), with each
  member of its group: whether it issued the op, and in what state, and the causes of its ranks.
- `compare_sets(earlier, later)`: two dump sets of one job; frtrace compare's JSON.
- `live_snapshot(out_dir, store=None, workers=None)`: frtrace live on a running job; the report
  of the later snapshot with its "live" part, the snapshots kept in out_dir.

Every path must lie under one of the roots given when the server starts (links resolved), and
is then checked as the command line checks it: a dump set is read, never written to, and a
snapshot folder is never one the server did not make. Every file read under it is opened
through no link, and the file opened, not its path, must lie under a root (reading.limits.confine):
a link inside a dump folder, or one swapped in after the check, is refused. A root may be a
store's URL: paths under it (no '..' part) are read through fsspec, nothing is written there, and
a server with no local root opens no local file. Arguments are bounded
(4,096 characters, 4,096 items) before any work. A failure is the tool's error, in the one line
the command would print.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any

from .errors import FrtraceError, UsageError, display_path, printable
from .reading.limits import confine, under
from .reading.remote import is_url

MAX_WINDOW = 500  # entries either side of a seq id rank_entries returns at most
MAX_INTERVAL_S = 60  # between live_snapshot's two snapshots
MAX_TEXT_ARGUMENT = 4096  # characters in one string argument (PATH_MAX): checked before any work
MAX_LIST_ARGUMENT = 4096  # items in one list argument (workers' addresses)


class Roots:
    """The folders the server may read from and write under, links resolved, and the URLs of
    stores it may read from (reading.remote), never written under."""

    def __init__(self, roots: Sequence[str]) -> None:
        self.roots = tuple(os.path.realpath(root) for root in roots if not is_url(root))
        self.urls = tuple(_plain_url(root) for root in roots if is_url(root))

    def check(self, path: str, what: str) -> str:
        """`path` where it resolves under a root; a UsageError naming the roots where not. What is
        then read under it is read through no link (limits.confine, set by main)."""
        if not isinstance(path, str) or not path or "\x00" in path:
            raise UsageError(f"{what}: give a path")
        if len(path) > MAX_TEXT_ARGUMENT:
            raise UsageError(f"{what}: a path of {len(path):,} characters; at most {MAX_TEXT_ARGUMENT:,}")
        if is_url(path):
            plain = _plain_url(path)
            if not any(plain == root or plain.startswith(root + "/") for root in self.urls) or ".." in plain.split("/"):
                raise UsageError(f"{what} {display_path(path)} is outside the stores this server may read "
                                 f"({', '.join(self.urls) or 'none'}); start it with --root for that URL")
            return path
        real = os.path.realpath(path)
        if not under(real, self.roots):
            raise UsageError(f"{what} {display_path(path)} is outside the folders this server may read "
                             f"({', '.join(display_path(r) for r in self.roots)}); start it with --root for that folder")
        return path


def _plain_url(url: str) -> str:
    """A URL with its scheme in lower case and no trailing '/', to compare with a root's."""
    scheme, _, rest = url.partition("://")
    return f"{scheme.lower()}://{rest.rstrip('/')}"


def _entry(entry) -> dict[str, Any]:
    return {"record_id": entry.record_id, "op": entry.op, "collective_seq_id": None if entry.is_p2p else entry.collective_seq_id,
            "p2p_seq_id": entry.p2p_seq_id if entry.is_p2p else None, "state": entry.state,
            "input_sizes": [list(s) for s in entry.input_sizes], "output_sizes": [list(s) for s in entry.output_sizes],
            "input_dtypes": list(entry.input_dtypes), "output_dtypes": list(entry.output_dtypes)}


class Tools:
    """What each MCP tool does, as plain calls (the server wraps them; the tests may call them)."""

    def __init__(self, roots: Roots) -> None:
        self.roots = roots

    def _analyzed(self, path: str):
        from .api import analyze_dumps

        return analyze_dumps(self.roots.check(path, "path"), jobs=1)

    def analyze_dumps(self, path: str) -> dict[str, Any]:
        return self._analyzed(path).as_dict()

    def rank_entries(self, path: str, rank: int, group: str, seq: int | None = None, window: int = 10) -> dict[str, Any]:
        result = self._analyzed(path)
        dumps, table = result.loaded.dumps, result.table
        if rank not in dumps:
            raise UsageError(f"rank {rank}: no dump of it in {display_path(path)} (ranks {sorted(dumps)[:16]}...)")
        chosen = [g for g in table.groups if rank in g.ranks and group in (g.name, g.desc, g.label)]
        if not chosen:
            names = sorted({g.desc or g.name for g in table.groups if rank in g.ranks})
            raise UsageError(f"group {group!r}: rank {rank} is in no such group (its groups: {', '.join(names)})")
        found = chosen[0]
        window = max(1, min(int(window), MAX_WINDOW))
        entries = [e for e in dumps[rank].entries if table.group_of(rank, e.pg_name) is found]
        if seq is None:
            shown = entries[-2 * window:]
        else:
            shown = [e for e in entries if not e.is_p2p and abs(e.collective_seq_id - seq) <= window]
        return {"rank": rank, "group": {"pg_name": found.name, "pg_desc": found.desc, "ranks": list(found.ranks)},
                "entries_in_group": len(entries), "entries": [_entry(e) for e in shown]}

    def explain_finding(self, path: str, index: int = 0) -> dict[str, Any]:
        from .outputs.timeline import root_entries

        result = self._analyzed(path)
        findings = result.analysis.findings
        if not 0 <= index < len(findings):
            raise UsageError(f"finding {index}: the report holds {len(findings)} finding(s) (index from 0)")
        finding = findings[index]
        issued = root_entries(finding, result.loaded.dumps, result.table)
        report = result.as_dict()
        return {"finding": report["findings"][index], "headline": report["headline"],
                "members": [{"rank": rank, "issued": rank in issued, "state": issued[rank].state if rank in issued else None,
                             "has_dump": rank in result.loaded.dumps}
                            for rank in finding.expected_ranks],
                "causes": {str(r): report["causes"][str(r)] for r in finding.ranks if str(r) in report["causes"]},
                "evidence": report["evidence"] if finding.root_cause else []}

    def compare_sets(self, earlier: str, later: str) -> dict[str, Any]:
        from .api import compare_sets

        compared = compare_sets(self.roots.check(earlier, "earlier"), self.roots.check(later, "later"), jobs=1)
        return json.loads(json.dumps(compared.as_dict()))  # as frtrace compare --json writes it

    def live_snapshot(self, out_dir: str, store: str | None = None, workers: list[str] | None = None,
                      interval: float = 3.0) -> dict[str, Any]:
        from .live.session import live_snapshot

        if not store and not workers:
            raise UsageError("give the job's store (HOST:PORT, its MASTER_ADDR:MASTER_PORT) or its workers' addresses")
        if not (interval == 0 or 0.1 <= interval <= MAX_INTERVAL_S):
            raise UsageError(f"interval: seconds between the two snapshots, 0.1 to {MAX_INTERVAL_S}, or 0 for one "
                             f"snapshot; not {interval}")
        if isinstance(out_dir, str) and is_url(out_dir):
            raise UsageError("out_dir: a snapshot is written to a local folder under a root, not to a store")
        self.roots.check(out_dir, "out_dir")
        snap = live_snapshot(store=store or None, workers=() if store else tuple(workers or ()), out_dir=out_dir,
                             interval=interval, jobs=1)
        return json.loads(json.dumps(snap.as_dict()))  # as frtrace live --json writes it


def build_server(roots: Sequence[str]):
    """The MCP server: each tool of Tools, its failures the tool's errors (one line)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from pydantic import ValidationError

    class Server(MCPServer):
        """The SDK's server, with each call's arguments bounded before any work and refused in one
        line that names them, never echoing what was given (the SDK's own error is pydantic's
        multi-line text, with the values)."""

        async def call_tool(self, name, arguments, context=None):
            oversized = _oversized(arguments or {})
            if oversized:
                raise ToolError(f"{name}: {oversized}")
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                if isinstance(exc.__cause__, ValidationError):
                    raise ToolError(f"{name}: {_invalid(exc.__cause__)}") from None
                raise

    tools = Tools(Roots(roots))
    server = Server("frtrace", instructions="Analyze PyTorch Flight Recorder dumps of a hung distributed job: "
                    "analyze_dumps first, then rank_entries and explain_finding to look closer.")

    def guarded(method):
        def call(*args, **kwargs):
            try:
                return method(*args, **kwargs)
            except FrtraceError as exc:
                raise ToolError(str(exc)) from None
        return call

    @server.tool(description="Analyze a folder or archive of Flight Recorder dumps (one per rank): the JSON report "
                             "(verdict, culprit ranks, cause, evidence, findings, each rank's state; frtrace schema).")
    def analyze_dumps(path: str) -> dict[str, Any]:
        return guarded(tools.analyze_dumps)(path)

    @server.tool(description="One rank's entries in one of its groups (name or desc): within `window` collective "
                             "seq ids of `seq`, or its last 2 x window entries when seq is not given.")
    def rank_entries(path: str, rank: int, group: str, seq: int | None = None, window: int = 10) -> dict[str, Any]:
        return guarded(tools.rank_entries)(path, rank, group, seq, window)

    @server.tool(description="One finding of the report (index from 0, root causes first) with each member of its "
                             "group: whether it issued the op and in what state; and the causes of its ranks.")
    def explain_finding(path: str, index: int = 0) -> dict[str, Any]:
        return guarded(tools.explain_finding)(path, index)

    @server.tool(description="Two dump sets of one job, the earlier first: which ranks moved, which are frozen "
                             "(frtrace compare's JSON).")
    def compare_sets(earlier: str, later: str) -> dict[str, Any]:
        return guarded(tools.compare_sets)(earlier, later)

    @server.tool(description="Read a running job now from PyTorch's debug server (its store HOST:PORT, or its "
                             "workers' addresses): two snapshots kept under out_dir, analysed; the report with 'live'.")
    def live_snapshot(out_dir: str, store: str | None = None, workers: list[str] | None = None,
                      interval: float = 3.0) -> dict[str, Any]:
        return guarded(tools.live_snapshot)(out_dir, store, workers, interval)

    return server


def _oversized(arguments: dict[str, Any]) -> str | None:
    """What is too large in a call's arguments, naming it and its size (never its value); None."""
    for name, value in arguments.items():
        shown = str(name)[:64]
        if isinstance(value, str) and len(value) > MAX_TEXT_ARGUMENT:
            return f"{shown}: {len(value):,} characters; at most {MAX_TEXT_ARGUMENT:,}"
        if isinstance(value, (list, dict)):
            if len(value) > MAX_LIST_ARGUMENT:
                return f"{shown}: {len(value):,} items; at most {MAX_LIST_ARGUMENT:,}"
            if any(isinstance(item, str) and len(item) > MAX_TEXT_ARGUMENT for item in value):
                return f"{shown}: an item over {MAX_TEXT_ARGUMENT:,} characters"
    return None


def _invalid(error) -> str:
    """A pydantic ValidationError in one line: each argument and what it must be, without the value."""
    said = []
    for item in error.errors()[:4]:
        where = ".".join(str(part)[:64] for part in item.get("loc", ())) or "arguments"
        said.append(f"{printable(where)}: {printable(str(item.get('msg', 'invalid'))[:120])}")
    more = f" (and {len(error.errors()) - 4} more)" if len(error.errors()) > 4 else ""
    return "invalid arguments: " + "; ".join(said) + more


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="frtrace mcp", description="frtrace as an MCP server over stdio (for agents).")
    parser.add_argument("--root", action="append", required=True, metavar="DIR",
                        help="a folder the tools may read dumps from and write snapshots under (repeatable)")
    args = parser.parse_args(argv)
    missing = [root for root in args.root if not is_url(root) and not os.path.isdir(root)]
    if missing:
        raise UsageError(f"--root {display_path(missing[0])}: not a folder (or a store's URL, s3://bucket/prefix)")
    # every file read from now on lies under a root, reached through no link (a store's URLs are read through fsspec)
    confine(tuple(root for root in args.root if not is_url(root)))
    try:
        server = build_server(args.root)
    except ImportError:
        raise UsageError("frtrace mcp needs the MCP SDK: pip install 'frtrace[mcp]'") from None
    server.run("stdio")
    return 0
