"""The config service: documents per scope and the effective config."""
