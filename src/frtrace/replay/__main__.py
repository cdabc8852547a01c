"""python -m frtrace.replay DIR: run a replay (runner.py)."""

import sys

from .runner import main

if __name__ == "__main__":
    sys.exit(main())
