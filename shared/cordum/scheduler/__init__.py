"""Scheduling domain: job lifecycle on submit and result, routing, retries."""
