"""A loop module that ends its process while it is imported."""

import os

os._exit(0)


def main(**options):  # never reached
    return None
