"""Reading a dump set: finding the files (a folder or an archive), reading each safely into typed
dumps (in worker processes), resolving the groups and lining up their sequence ids."""
