"""Cordum Serverless: the Cordum control plane for AI-agent jobs on AWS-compatible services."""

__version__ = "0.1.0"
