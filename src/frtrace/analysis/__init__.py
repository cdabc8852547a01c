"""Analysing a dump set: aligning each group's collectives across its ranks, checking each one,
the wait-for graph, and the verdict."""
