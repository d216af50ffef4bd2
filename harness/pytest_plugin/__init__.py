"""pytest glue: the pytest11 entry point, its options and markers, and the hooks it adds."""
