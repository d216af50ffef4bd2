"""Multi-Tier Checkpointing on the fake cluster: ramdisks, peers, a backup bucket, and an
emulated replication service speaking the real Orbax MTC client's file protocol."""
