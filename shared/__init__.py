"""spotjobs' shared logic: pure, typed, clients passed in. See DESIGN in the README."""
