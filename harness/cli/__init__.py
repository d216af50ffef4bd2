"""The ``pathways-chaos`` command line."""
