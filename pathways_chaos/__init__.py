"""pathways-chaos: prove that elastic JAX training survives failure on Cloud Pathways."""
