"""Fault injectors. Importing the package registers every built-in fault kind.

``model`` defines ``Fault`` and the registry its subclasses join when their module is imported;
the kind modules below import ``model``, never the other way round, so there is no import
circle. They import nothing heavy at load (the Kubernetes client only inside calls).
"""

from pathways_chaos.faults import kubernetes as kubernetes
from pathways_chaos.faults import mtc as mtc  # Multi-Tier Checkpointing (issue 15)
from pathways_chaos.faults import slice as slice
