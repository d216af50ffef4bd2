from __future__ import annotations

import subprocess
import sys

import pytest

from pathways_chaos.harness.engine.topology import (
    MAX_CPU_DEVICES,
    SliceTopology,
    request_cpu_devices,
)
from pathways_chaos.harness.errors import ChaosConfigError


@pytest.mark.parametrize("shape", [(0, 2), (4, 0), (-1, 2), (2.5, 2)])
def test_a_slice_shape_that_does_not_fit_is_refused(shape):
    with pytest.raises(ChaosConfigError, match="does not fit"):
        SliceTopology(*shape)


def test_more_devices_than_can_be_made_is_refused_before_jax_aborts():
    with pytest.raises(ChaosConfigError, match=f"more than the {MAX_CPU_DEVICES}"):
        SliceTopology(MAX_CPU_DEVICES, 2)
    with pytest.raises(ChaosConfigError, match="use fewer slices"):
        request_cpu_devices(MAX_CPU_DEVICES + 1)


def test_parse_shape():
    assert SliceTopology.parse("4x2") == SliceTopology(4, 2)
    with pytest.raises(ChaosConfigError, match="write for example 4x2"):
        SliceTopology.parse("four by two")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("0x2", "num_slices=0 does not fit"),  # was "is not NxM": the shape was right
        ("100000x100000", "more than the"),
        ("\uff14x2", "is not NxM"),  # a full-width 4 was taken as 4
        (" 4x2", "is not NxM"),
        ("1" * 5000 + "x2", "is not NxM"),  # past int()'s digit limit: a ValueError traceback
    ],
)
def test_a_shape_out_of_range_says_which_number(text, says):
    with pytest.raises(ChaosConfigError, match=says):
        SliceTopology.parse(text)


def test_a_bigger_cluster_after_jax_started_says_what_to_do(fake_cluster_factory):
    import jax

    have = len(jax.devices("cpu"))
    with pytest.raises(ChaosConfigError) as info:
        fake_cluster_factory(have, 2)
    message = str(info.value)
    assert f"JAX already started with {have} CPU devices" in message
    assert "--fake-slices" in message and "\n" not in message


def test_a_smaller_cluster_uses_the_first_devices(fake_cluster_factory):
    with fake_cluster_factory(2, 2) as fake:
        assert [d.id for d in fake.devices] == [0, 1, 2, 3]
        assert fake.slice_to_device_ids() == {0: [0, 1], 1: [2, 3]}


def test_device_count_is_set_before_jax_starts_in_a_new_process():
    code = (
        "from pathways_chaos.harness.engine.topology import request_cpu_devices\n"
        "request_cpu_devices(12)\n"
        "import jax; print(len(jax.devices()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "12"
