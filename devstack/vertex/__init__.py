"""The Vertex AI emulator: the CustomJob REST surface served on this machine, jobs run as local
processes. Start it with `python -m devstack.vertex.emulator`; `emulator` describes the API."""
