"""Redis adapters. Key names and hash fields are Cordum's (reference section 2)."""
