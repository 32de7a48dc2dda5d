"""The workflow engine: definitions, runs, the DAG advance, step kinds, expressions, timers
and the reconciler. Runs advance on queued events, never on a process that waits."""
