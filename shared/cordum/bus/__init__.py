"""NATS side: publishing, the NATS->SQS bridge, heartbeat ingest."""
