"""A job's record: where its time went (phases) and the --trace file; scheduler/report draws it."""
