"""Retraining triggers: definitions (data), windows (state in the state bucket), and the request
each window publishes. See docs/ARCHITECTURE.md, "Retraining triggers"."""
