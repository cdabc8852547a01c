"""Comparing two dump sets of one job (`frtrace compare`): is it hung or just slow."""
