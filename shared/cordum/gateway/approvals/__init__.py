"""Approvals: the jobs waiting for a human, approve and reject, a job's approval context."""
