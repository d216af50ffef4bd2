"""The labels a Pathways JobSet puts on its Jobs and Pods: how every Kubernetes piece finds a slice.

Defined once: the faults, the ``--cluster`` backend and the local workload fixture all select by
them, and a second copy drifting would make a fault miss its target silently.
"""

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
#: The replicated job that holds the TPU workers (one Job per slice), as the guides name it.
WORKER_REPLICATED_JOB = "worker"
#: Every name a worker replicatedJob goes by: the guides' ``worker``, pathwaysutils' generator's.
WORKER_JOB_NAMES = (WORKER_REPLICATED_JOB, "pathways-worker")


def workers_selector(jobset: str) -> str:
    """The label selector of every worker Pod (or Job) of the JobSet."""
    return f"{JOBSET_NAME_LABEL}={jobset},{REPLICATED_JOB_LABEL} in ({','.join(WORKER_JOB_NAMES)})"


def slice_selector(jobset: str, slice_index: int) -> str:
    """The label selector of one slice's worker Pods (or its Job)."""
    return f"{workers_selector(jobset)},{JOB_INDEX_LABEL}={slice_index}"
