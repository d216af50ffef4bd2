import os, sys, importlib.util
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax, tempfile
spec = importlib.util.spec_from_file_location("m", sys.argv[1]); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
class D:  # fake slice_index
    pass
devs = jax.devices()
for i, d in enumerate(devs):
    try: object.__setattr__(d, "slice_index", i // 2)
    except Exception as e: pass
print(jax.tree.map(lambda a: a, m.main(checkpoint_dir=tempfile.mkdtemp()) if "checkpoint" in sys.argv[2:] else m.main()))
