"""Every job of one trace: GET /api/v1/traces/{id}."""
