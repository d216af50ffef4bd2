"""Pre-migration acceptance checks: a team's own code, manifests and trainer, before a big run.

``static_checks`` reads Python source, ``manifest_checks`` reads JobSet YAML, ``ramdisk`` sizes
the Multi-Tier Checkpointing ramdisk, ``runtime`` runs the team's adapter on the fake cluster,
``table`` turns every result into one row (PASS, FAIL, SKIP or NOT JUDGED) of a table or a
report file, and ``options`` holds the suite's ``--acceptance-*`` pytest options.
"""
