"""Running a job: the scheduler's pure state machine (cluster_state), its messages, and the thin
asyncio shell (run)."""
