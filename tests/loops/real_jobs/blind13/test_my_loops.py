import pytest

D = "/tmp/blind13/"
CASES = [
    ("l02_flax_class_fit_ok", "deadline_exceeded@batch=7:slice=3:repair_after_polls=2", True),
    ("l13_multisteps_pause_resume_ok", "flapping@batch=5:slice=2", True),
    ("l12_pos_from_step_every3_ok", "data_loss@batch=11:slice=2:repair_after_polls=2,data_loss@restore=1:slice=3:repair_after_polls=2", True),
    ("l03_sched_metrics_ok", "internal@batch=14:slice=1", True),
    ("l07_snapshot_top_of_loop", "data_loss@save=5:slice=2:repair_after_polls=2", False),
    ("l11_attempt_states_leak", "not_found@batch=12:slice=3:repair_after_polls=2", False),
    ("l10_rng_not_saved", "data_loss@batch=9:slice=1", False),
    ("l08_mesh_built_once", "data_loss@batch=9:slice=3", False),
]


@pytest.mark.chaos
@pytest.mark.parametrize("name,schedule,ok", CASES, ids=[c[0] for c in CASES])
def test_loop(chaos, name, schedule, ok):
    out = chaos.run(schedule, loop=f"{D}{name}.py:main")
    print(out.verdict.summary())
    if ok:
        out.verdict.raise_if_failed()
    else:
        with pytest.raises(Exception) as ei:
            out.verdict.raise_if_failed()
        print("FIRST LINE:", str(ei.value).splitlines()[0][:300])


@pytest.mark.chaos
def test_never_fires(chaos):
    out = chaos.run("data_loss@batch=999:slice=1", loop=f"{D}l01_scan_accum_ok.py:main")
    out.verdict.raise_if_failed()
