"""The worker registry: who is alive, and the snapshot document that says so.

Written by the bridge (``ingest``: heartbeats -> ``LiveRegistry`` -> ``SnapshotWriter``),
read by the scheduler and the gateway (``SnapshotReader``, ``parse_snapshot``). The
document itself, its key and its TTL are defined once, in ``snapshot``.

Nothing is imported here: a reader (the submit function) should not load the
writer's NATS and Redis machinery.
"""
