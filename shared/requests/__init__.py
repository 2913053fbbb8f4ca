"""Requests: what a job request may be, and the one front door that reads and validates it.

Owns the message envelope and its two accepted shapes (`envelope`: `read_request`,
`canonical_envelope`, the re-queue attributes), its optional fields read and bounded
(`envelope_options`), what names a request (`request_ids`), the CustomJob schema walk
(`job_schema`), the field allowlist (`job_fields`), what a deployment lets a job do (`job_policy`:
images, accounts, machines, limits; image references are parsed by the foundation's
`shared.image_ref`, which the settings check too), attempt planning (`attempts`: where and how
attempt n runs) and the front door, `policy.validate_request`: a message in, a validated
`JobRequest` or an `InvalidJobRequest` naming every violation out.

May import: the foundation (settings, errors, log, clock). Nothing that does I/O.
"""
