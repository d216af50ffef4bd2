"""Mesh rebuild: after any losses and rejoins the mesh is exactly the active slices."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pathways_chaos.harness import properties


#: The plugin's default is 8 CPU devices (16 slices need --fake-slices 16
#: --fake-devices-per-slice 1); the strategy adapts to what this process has.
@properties.share_of_profile(0.5)
@given(data=st.data())
def test_mesh_holds_exactly_the_active_slices_in_order(
    chaos_trainer: str, max_devices: int, data: st.DataObject
) -> None:
    spec = data.draw(properties.mesh_specs(max_devices=max_devices, trainer=chaos_trainer))
    properties.check_mesh_episode(spec)
