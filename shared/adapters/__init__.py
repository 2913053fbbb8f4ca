"""Adapters: the I/O to Google's services, behind plain functions.

Owns the Vertex AI adapter (`vertex`: build, create, get, find and cancel CustomJobs, the job
labels; the job as plain data is the foundation's `shared.jobs`), the process-wide clients (`clients`, lazily created) and the opt-in record of every
Google API call a function makes (`api_recording`, for the permission test).

May import: the foundation only.
"""
