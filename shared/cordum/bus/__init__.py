"""NATS side: publishing, and the bridge (JetStream -> SQS forwarder, pool flush, process)."""
