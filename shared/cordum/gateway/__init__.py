"""Cordum's HTTP API on API Gateway (REST) and Lambda.

One package per feature (``jobs``, ``approvals``, ``dlq``, ``workflows``, ``system``,
``docs``), each with its routes, service, views, models, schemas and OpenAPI part,
over ``core`` (auth, rate limits, errors, request helpers, paging, the shared
clients and models). A feature imports ``core`` and the layers below, never another
feature; ``app`` wires them all (tests/lint/layers.py holds the rule).
"""
