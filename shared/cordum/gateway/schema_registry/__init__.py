"""The schema registry and the topics that name an input schema."""
