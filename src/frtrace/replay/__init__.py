"""Replaying a job's communication: the plan written from a dump set (`frtrace replay`) and the
runner that replays it (`python -m frtrace.replay DIR`, the only code that imports torch)."""
