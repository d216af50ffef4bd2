"""The episode engine: topology, clock, seams, fake cluster, recorder, episode runner."""
