"""The OpenAPI document of the whole API and its Swagger UI page."""
