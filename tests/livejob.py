"""A real gloo job (PyTorch, CPU) with PyTorch's debug server on, left hanging for frtrace live.

    python tests/livejob.py FAULT WORLD PORT   # spawned by tests/test_live.py; runs until killed

Every rank runs three steps of tp, dp and world all_reduces, then FAULT: "skip" (rank 2 leaves out
the last world all_reduce and sleeps), "stall" (rank 2 sleeps before it: in compute), "die" (rank 2's
process ends before it, with status 0 so that the launcher keeps the others running; they wait in it
until gloo sees the closed connection, then sleep, as NCCL ranks wait for a dead peer until the
watchdog's timeout), "healthy" (every rank goes on stepping). Each rank starts the debug server's worker after
init_process_group; its URL is in the job's store (MASTER_ADDR:MASTER_PORT) under
debug_server/rank<R>. The process groups' timeout is an hour: the hang lasts until the test ends it.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
import time


def _rank(rank: int, world: int, port: int, fault: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      TORCH_FR_BUFFER_SIZE="2000")
    import torch
    import torch.distributed as dist
    from torch.distributed.debug import start_debug_server

    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(hours=1))
    tp = [dist.new_group([r, r + 1]) for r in range(0, world, 2)]
    dp = [dist.new_group(list(range(j, world, 2))) for j in (0, 1)]
    start_debug_server(port=_free_port() if rank == 0 else 0)
    t = torch.ones(3, 4)
    steps = 0
    while True:
        steps += 1
        dist.all_reduce(t, group=tp[rank // 2])
        dist.all_reduce(t, group=dp[rank % 2])
        if steps > 3 and rank == 2 and fault in ("skip", "stall", "die"):
            if fault == "die":
                os._exit(0)
            if fault == "skip":
                dist.all_reduce(t, group=tp[rank // 2])  # goes on without the world all_reduce
            time.sleep(3600)
        try:
            dist.all_reduce(t)
        except RuntimeError:  # gloo: "Connection closed by peer" once rank 2 is gone
            if fault != "die":
                raise
            time.sleep(3600)
        if fault == "healthy":
            time.sleep(0.02)
        elif steps > 3:
            time.sleep(3600)  # the others' last op is this step's world all_reduce


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    import torch.multiprocessing as mp

    fault, world, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    mp.start_processes(_rank, args=(world, port, fault), nprocs=world, start_method="spawn", join=True)


if __name__ == "__main__":
    main()
