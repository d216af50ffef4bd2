"""What every property shares: the failure type, the example counter, the session's trainer,
the device count, the compilation cache and the hypothesis settings of a seeded search."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from pathways_chaos.harness.errors import ChaosError
from pathways_chaos.harness.properties.episode_spec import REFERENCE_TRAINER, EpisodeSpec

LOSS_KINDS = ("data_loss", "deadline_exceeded", "not_found", "internal")

#: Why no generated repair lands at the step its slice was lost: the fake cluster deletes the
#: slice's arrays at the loss but raises the slice-down error only while the slice is down, so
#: a repair in the same trainer event leaves the trainer reading deleted arrays
#: ("RuntimeError: Array has been deleted"), which is not a slice-down error and ends the run.
#: Found by the dataset property: data_loss@step=2:slice=0,repair@step=2:slice=0 (2x2).
REPAIR_SAME_STEP = "data_loss@step=2:slice=0,repair@step=2:slice=0"


#: Steps after its repair before a rejoined slice may be the last one holding a replica: it
#: rejoins at the next poll and is in a snapshot by the next interval (at most 4 here).
REJOIN_MARGIN = 6


class PropertyFailure(ChaosError, AssertionError):
    """A property does not hold; the message says which, and how to reproduce it."""


class PropertyNotJudged(ChaosError):
    """A property ran no example at all (its budget was spent): never a pass; says why."""


@dataclasses.dataclass
class ExampleCounter:
    """How many examples a property ran, and which one failed first (for the mutant table)."""

    examples: int = 0
    first_failure: int | None = None
    recompiles: list[int] = dataclasses.field(default_factory=list)
    discarded: int = 0  # examples hypothesis threw away before their episode ran
    features: list[set[str]] = dataclasses.field(default_factory=list)

    def saw(self, events: list[dict[str, Any]]) -> None:
        """An episode's log, once played (the search's episode record overrides this)."""
        # churn.recompiles, counted here: churn imports this module.
        self.recompiles.append(sum(1 for e in events if e["kind"] == "mesh" and e["recompile"]))

    def run(self, body: Callable[[], None]) -> None:
        self.examples += 1
        try:
            body()
        except Exception:
            if self.first_failure is None:
                self.first_failure = self.examples
            raise


def available_devices() -> int:
    """CPU devices this process has (the plugin's --fake-slices x --fake-devices-per-slice)."""
    import jax

    return len(jax.devices("cpu"))


def enable_compilation_cache() -> None:
    """XLA compiles each mesh shape once per machine (the persistent cache of
    ``harness.engine.compilation_cache``), not once per example or per process.

    The trainer still records a mesh new to its run as a recompile; only the XLA compilation
    is served from the cache (as a production job's cache would).
    """
    from pathways_chaos.harness.engine import compilation_cache

    compilation_cache.enable()


def share_of_profile(share: float, minimum: int = 3) -> Any:
    """Settings running ``share`` of the loaded profile's examples (episodes cost ~1 s each)."""
    from hypothesis import settings

    return settings(max_examples=max(minimum, int(settings().max_examples * share)))


def trainer_under_test(config: Any) -> str:
    """The trainer the property suites test: ``--chaos-trainer MODULE:CLASS``.

    With ``--chaos-loop`` (a user's own loop) the suites run the loop search
    (``properties.loop``) instead, and this is not asked: asked anyway, it says so rather than
    silently naming the reference trainer.
    """
    import pytest

    from pathways_chaos.harness.play import load_object

    loop = config.getoption("chaos_loop", None)
    if loop:
        raise pytest.UsageError(
            f"--chaos-loop={loop}: the trainer property suites run trainer classes; the loop "
            "is searched by suites/properties/test_loop_properties.py"
        )
    spec = str(config.getoption("chaos_trainer", None) or REFERENCE_TRAINER)
    # A bad spec is a one-line error now, not in every example; a trainer the toolkit did not
    # write is checked in a child process, never imported here.
    if spec.startswith("pathways_chaos."):
        load_object(spec, "--chaos-trainer")
        return spec
    from pathways_chaos.harness.episodes.supervised_trainer import check_trainer
    from pathways_chaos.harness.errors import ChaosConfigError

    problem = check_trainer(spec)
    if problem is not None:
        raise ChaosConfigError(problem)
    return spec


def fail(prop: str, problems: list[str], spec: EpisodeSpec | None = None) -> None:
    if not problems:
        return
    lines = [f"{prop} property violated:", *(f"  - {p}" for p in problems)]
    if spec is not None:
        lines += [f"  schedule: {spec.schedule or '(none)'}", f"  replay: {spec.replay_command()}"]
    raise PropertyFailure("\n".join(lines))


def mutant_search(max_examples: int) -> Any:
    """The seeded search each mutant must be caught within: reproducible (derandomized, no
    database), generation only (the table and the bench want the first failure, not a shrink)."""
    from hypothesis import HealthCheck, Phase, settings

    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck),
        stateful_step_count=12,
    )
