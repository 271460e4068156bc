"""Running converted models: devices, the scheduler, the batch (sequences and the KV block pool)
and the runners that execute its steps."""
