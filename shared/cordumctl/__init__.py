"""cordumctl: the operator's command line for Cordum's HTTP API.

A client of the API only: it never imports the control plane (``cordum``), so it
installs and runs wherever the API is reachable, and stays out of the Lambda layer.
"""
