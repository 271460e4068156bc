"""Running converted models: devices, KV block pool, sampling, the step runner."""
