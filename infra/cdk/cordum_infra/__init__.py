"""CDK constructs of the Cordum Serverless stack, one module per concern."""
