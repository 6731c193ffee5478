"""Closed-form noise schedules (paper Table noise_schedules)."""
