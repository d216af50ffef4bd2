"""Episode runners: one schedule played against a trainer or a user's loop on a cluster.

Above the engine, the faults, the reference trainer and the black-box observer (it uses all of
them); below the judges' callers (``play``), the suites and the fixtures.
"""
