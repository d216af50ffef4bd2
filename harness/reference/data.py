"""A synthetic MapDataset whose samples carry their own id, so the log can say what was eaten."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

FEATURES = 4


@dataclasses.dataclass(frozen=True)
class SyntheticData:
    """``size`` samples; sample ``i`` of the dataset order has id ``order(i)``."""

    size: int = 100_000
    seed: int = 0
    shuffle: bool = False

    def sample(self, sample_id: int) -> dict[str, Any]:
        """The features of a sample are a pure function of its id."""
        phase = np.arange(1, FEATURES + 1, dtype=np.float64)
        x = np.sin(sample_id * 0.37 * phase + self.seed).astype(np.float32)
        y = np.float32(np.tanh(x @ np.array([0.5, -0.25, 0.125, 1.0], np.float32)))
        return {"id": np.int64(sample_id), "x": x, "y": y}

    def batch(self, ids: list[int]) -> dict[str, np.ndarray]:
        samples = [self.sample(i) for i in ids]
        return {k: np.stack([s[k] for s in samples]) for k in ("id", "x", "y")}

    def map_dataset(self) -> Any:
        import grain

        ds = grain.MapDataset.range(self.size)
        if self.shuffle:
            ds = ds.shuffle(seed=self.seed)
        return ds.map(lambda i: self.sample(int(i)))

    def order(self, count: int) -> list[int]:
        """The ids a fault-free run consumes, in order."""
        if not self.shuffle:
            return list(range(count))
        ds = self.map_dataset()
        return [int(ds[i]["id"]) for i in range(count)]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
