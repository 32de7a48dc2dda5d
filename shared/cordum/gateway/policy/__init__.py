"""Policy governance: the system policy's bundles, their snapshots, publish and rollback,
the audit of every change, and questions to the safety kernel (evaluate, simulate,
explain)."""
