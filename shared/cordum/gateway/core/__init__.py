"""What every feature of the HTTP API builds on: authentication, rate limits, errors,
request and answer helpers, paging, the job lock, the shared clients, and the models
and OpenAPI types more than one feature uses. It imports no feature."""
