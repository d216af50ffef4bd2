"""The nightly search at cluster scale: the property suites as shards (an Indexed Job on
Kubernetes, or local processes), one shared hypothesis example database, one merged report.

``plan`` turns a shard index into seeds and properties, ``shard`` runs one shard, ``database``
opens the shared example database, ``job`` writes the Indexed Job, ``merge`` the HTML report.
Nothing here imports JAX at import time.
"""
