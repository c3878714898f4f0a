"""The run recorder: TauRuns and evidence of every run (ARCHITECTURE.md section 5)."""
