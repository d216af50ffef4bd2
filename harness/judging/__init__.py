"""Judging an episode from its event log: the oracle and the checks it is built from."""
