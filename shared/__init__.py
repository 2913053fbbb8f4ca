"""spotjobs' shared logic: pure, typed, clients passed in. The map is docs/ARCHITECTURE.md."""
