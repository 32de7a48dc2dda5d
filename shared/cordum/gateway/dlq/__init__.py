"""The dead-letter queue: list, delete, retry a dead-lettered job as a new one."""
