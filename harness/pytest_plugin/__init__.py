"""The pytest plugin: options, markers, hooks and the checks on their values."""
