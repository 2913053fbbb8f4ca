"""The deterministic simulator of the control plane (docs/ARCHITECTURE.md, "The deterministic
simulator"): the five functions' real code on in-memory stand-ins, one seed at a time."""
