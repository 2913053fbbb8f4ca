"""Retraining triggers: definitions (data), windows (state in the state bucket), and the request
each window publishes. See docs/ARCHITECTURE.md, "Retraining triggers".

May import: the foundation, `requests` (a rendered request is validated), `wiring` and `delivery`.
"""
