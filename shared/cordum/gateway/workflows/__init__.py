"""Workflows: definitions, runs, reruns and dry runs behind the HTTP API."""
