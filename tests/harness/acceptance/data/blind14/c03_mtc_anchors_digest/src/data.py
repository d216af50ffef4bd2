# ruff: noqa
"""Input pipeline. One controller reads the global dataset (Pathways single-controller)."""

import grain
import numpy as np

GLOBAL_BATCH = 256


class TokenSource(grain.sources.RandomAccessDataSource):
    def __init__(self, n=100_000, seqlen=128):
        self._n, self._seqlen = n, seqlen

    def __len__(self):
        return self._n

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        return {"id": np.int64(i), "tokens": rng.integers(0, 32000, self._seqlen, dtype=np.int32)}


def make_loader(seed: int = 1234):
    sampler = grain.samplers.IndexSampler(
        num_records=100_000,
        shard_options=grain.sharding.NoSharding(),
        shuffle=True,
        seed=seed,
    )
    return grain.DataLoader(
        data_source=TokenSource(),
        sampler=sampler,
        operations=[grain.transforms.Batch(GLOBAL_BATCH, drop_remainder=True)],
        worker_count=0,
    )
