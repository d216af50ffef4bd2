"""Correct trainers that are not the reference: other step math, the same right recovery.

The oracle must pass them (a judge that fails a correct trainer with no fault at all judges
the model, not the recovery). test_mutants.py runs each through the suites' checks;
``pytest suites/properties --chaos-trainer=pathways_chaos.harness.reference.variants:...``
runs the property suites on one.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from pathways_chaos.harness.reference import model
from pathways_chaos.harness.reference.trainer import ReferenceTrainer


class WeightDecayTrainer(ReferenceTrainer):
    """SGD with momentum and decoupled weight decay: another optimizer."""

    decay = 1e-2

    def step_function(self) -> Any:
        import jax

        base = functools.partial(model.train_step, lr=self.config.lr, beta=self.config.beta)
        decay = self.decay

        def step(state: Any, x: Any, y: Any) -> Any:
            new, loss = base(state, x, y)
            params = jax.tree.map(lambda p: p * (1 - decay), new["params"])
            return {**new, "params": params}, loss

        return step


class StepKeyedInputNoise(ReferenceTrainer):
    """Input noise drawn from (seed, step): randomness that a recovery replays exactly."""

    def before_step(self, step: int, batch: Any) -> Any:
        rng = np.random.default_rng((self.config.seed, step))
        noise = rng.normal(0, 0.1, batch["x"].shape).astype(batch["x"].dtype)
        return {**batch, "x": batch["x"] + noise}


class DropoutKeyInState(ReferenceTrainer):
    """Dropout on the inputs with a PRNG key carried in the state, so it is snapshotted."""

    rate = 0.1

    def init_state(self) -> Any:
        import jax

        return {**model.init_state(self.config.seed), "key": jax.random.PRNGKey(self.config.seed)}

    def step_function(self) -> Any:
        import jax

        base = functools.partial(model.train_step, lr=self.config.lr, beta=self.config.beta)
        keep = 1.0 - self.rate

        def step(state: Any, x: Any, y: Any) -> Any:
            key, sub = jax.random.split(state["key"])
            mask = jax.random.bernoulli(sub, keep, x.shape)
            inner = {"params": state["params"], "momentum": state["momentum"]}
            new, loss = base(inner, x * mask / keep, y)
            return {**new, "key": key}, loss

        return step


CORRECT_VARIANTS: tuple[type[ReferenceTrainer], ...] = (
    WeightDecayTrainer,
    StepKeyedInputNoise,
    DropoutKeyInState,
)
