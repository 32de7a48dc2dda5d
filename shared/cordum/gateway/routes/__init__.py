"""One powertools Router per area of the API; ``cordum.gateway.app`` includes them."""
