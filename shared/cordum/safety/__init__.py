"""Safety gate: the SafetyKernel gRPC client (scheduler side) and the kernel server."""
