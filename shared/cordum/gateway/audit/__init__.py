"""The audit chain over HTTP: a tenant's events (filtered, newest first), the chain's
verification, and its legal hold. Every read and every hold change is itself an event
of the chain (docs/audit.md, "The audit routes")."""
