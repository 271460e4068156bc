"""Voice cloning for Base models: a reference recording → the speaker vector and reference
codes an in-context or x-vector-only prompt needs (docs/MODEL.md §5.4, §10)."""
