"""Reading a running job: every rank's Flight Recorder and Python stacks fetched from PyTorch's
debug server, kept as a dump set, and analysed like one (`frtrace live`)."""
