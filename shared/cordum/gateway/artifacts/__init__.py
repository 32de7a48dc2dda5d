"""Artifacts and memory pointers."""
