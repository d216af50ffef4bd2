#!/bin/sh
# Entry point of the pathways-chaos container in the JobSet's head Pod (ci/gke/deploy/jobset.yaml).
#
# Why a script: --cluster takes KUBECONFIG_PATH:CONTEXT, and inside a Pod there is no kubeconfig,
# only the ServiceAccount token the Pod mounts. So: write a kubeconfig whose user names that token
# file (kubelet keeps it fresh; the client reads it when it loads the config), run pytest with the
# container's arguments, copy the reports to Cloud Storage if asked, and exit with pytest's status:
# the head Job, and so the JobSet, succeeds or fails with the suite.
set -u

SA_DIR=${SA_DIR:-/var/run/secrets/kubernetes.io/serviceaccount}
KUBECONFIG_OUT=${PATHWAYS_CHAOS_KUBECONFIG:-/var/run/pathways-chaos/kubeconfig}
REPORT_DIR=${REPORT_DIR:-/reports}
CONTEXT=in-cluster

fail() {
    echo "run-suite: $*" >&2
    exit 2
}

[ -n "${KUBERNETES_SERVICE_HOST:-}" ] || fail "KUBERNETES_SERVICE_HOST is not set: not in a Pod?"
[ -r "$SA_DIR/token" ] || fail "no ServiceAccount token at $SA_DIR/token (is runner-token mounted?)"
[ -r "$SA_DIR/ca.crt" ] || fail "no cluster CA at $SA_DIR/ca.crt"

host=$KUBERNETES_SERVICE_HOST
case $host in *:*) host="[$host]" ;; esac # an IPv6 address needs brackets in a URL
server="https://$host:${KUBERNETES_SERVICE_PORT:-443}"
namespace=$(cat "$SA_DIR/namespace" 2>/dev/null || echo default)

mkdir -p "$(dirname "$KUBECONFIG_OUT")" "$REPORT_DIR" || fail "cannot create folders"
umask 077
cat >"$KUBECONFIG_OUT" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: $CONTEXT
    cluster:
      server: $server
      certificate-authority: $SA_DIR/ca.crt
users:
  - name: pathways-chaos-runner
    user:
      tokenFile: $SA_DIR/token
contexts:
  - name: $CONTEXT
    context:
      cluster: $CONTEXT
      user: pathways-chaos-runner
      namespace: $namespace
current-context: $CONTEXT
EOF
echo "run-suite: kubeconfig $KUBECONFIG_OUT (context $CONTEXT, server $server)"

if [ "${RUN_SUITE_KUBECONFIG_ONLY:-}" = 1 ]; then # the tests stop here
    exit 0
fi

# startupPolicy InOrder starts the workers only once this Pod is ready, so pytest would read a
# JobSet without workers (the twin showed it: preflight saw 0 worker slices). Wait until every
# Pod of the JobSet's other replicatedJobs is Running and Ready (RUN_SUITE_WAIT_S=0: no wait).
if [ -n "${JOBSET_NAME:-}" ] && [ "${RUN_SUITE_WAIT_S:-900}" != 0 ]; then
    KUBECONFIG="$KUBECONFIG_OUT" python - "$namespace" "$JOBSET_NAME" "${RUN_SUITE_WAIT_S:-900}" <<'EOF' || exit 2
import sys
import time

from kubernetes import client, config

namespace, name, limit = sys.argv[1], sys.argv[2], float(sys.argv[3])
api = config.new_client_from_config()
jobset = client.CustomObjectsApi(api).get_namespaced_custom_object(
    "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", name
)
me = "pathways-head"
wanted = sum(
    int(rj.get("replicas", 1)) * int(rj["template"]["spec"].get("parallelism", 1))
    for rj in jobset["spec"]["replicatedJobs"]
    if rj["name"] != me
)
core = client.CoreV1Api(api)
deadline = time.monotonic() + limit
while True:
    pods = core.list_namespaced_pod(
        namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}"
    ).items
    ready = [
        p
        for p in pods
        if (p.metadata.labels or {}).get("jobset.sigs.k8s.io/replicatedjob-name") != me
        and p.status.phase == "Running"
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    ]
    if len(ready) >= wanted:
        print(f"run-suite: {len(ready)} worker Pods ready", flush=True)
        break
    if time.monotonic() > deadline:
        print(f"run-suite: only {len(ready)} of {wanted} worker Pods ready after {limit:.0f} s")
        sys.exit(1)
    time.sleep(1)
EOF
fi

python -m pytest "$@"
status=$?
echo "run-suite: pytest exited with $status"

if [ -n "${REPORT_GCS_URI:-}" ]; then
    run="${JOBSET_NAME:-pathways-chaos}-$(date -u +%Y%m%dT%H%M%SZ)"
    # Never let a failed upload hide the suite's own status.
    python - "$REPORT_DIR" "$REPORT_GCS_URI/$run" <<'EOF' || echo "run-suite: report upload failed" >&2
import pathlib
import sys

from google.cloud import storage

folder, target = pathlib.Path(sys.argv[1]), sys.argv[2].removeprefix("gs://")
bucket_name, _, prefix = target.partition("/")
bucket = storage.Client().bucket(bucket_name)
for path in sorted(p for p in folder.rglob("*") if p.is_file()):
    bucket.blob(f"{prefix}/{path.relative_to(folder)}").upload_from_filename(str(path))
    print(f"run-suite: uploaded gs://{bucket_name}/{prefix}/{path.relative_to(folder)}")
EOF
fi
exit "$status"
