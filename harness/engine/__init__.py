"""The episode engine: topology, clock, seams, the fake cluster, the recorder, episodes."""
