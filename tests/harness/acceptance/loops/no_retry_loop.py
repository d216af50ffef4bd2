"""A team's loop with no retry left: the sample loop whose retry policy allows one attempt, so
a lost slice crashes it (given as FILE.py:main, the way a team points at its own script)."""

from pathways_chaos.harness.reference import user_loop


def main(**options):
    return user_loop.train(max_attempts=1, **options)
