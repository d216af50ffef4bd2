"""A loop module that raises while it is imported."""

raise RuntimeError("boom at import")


def main(**options):  # never reached
    return None
