"""Named locks for agents that share a resource (/api/v1/locks)."""
