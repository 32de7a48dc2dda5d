"""The control plane as a whole: health, status and workers."""
