"""Approvals: the jobs waiting for a human, approve and reject, a gate's context."""
