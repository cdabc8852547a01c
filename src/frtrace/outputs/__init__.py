"""What a run writes: the text and JSON reports, the database's tables, SQLite, the timeline, the
HTML report, statistics, and the committing of output files together or not at all."""
