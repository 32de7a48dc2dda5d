"""Reference CAP worker (echo) for demos and tests."""
