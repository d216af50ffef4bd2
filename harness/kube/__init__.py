"""The Kubernetes backend of --cluster: the JobSet bridge, Pathways devices and Pod logs."""
