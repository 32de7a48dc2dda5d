"""Cordum's HTTP API on API Gateway (REST) and Lambda."""
