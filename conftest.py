"""Root conftest: the pathways-chaos plugin itself is loaded through its pytest11 entry point."""
