"""Sweeps: a sweep's folder (its manifest, each job's record), the job every launcher runs, launching and following
them, and the sweep's table."""
