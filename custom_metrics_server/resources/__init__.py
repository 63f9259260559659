"""The KEP-1748 pod resource model, pure: requests and limits as the scheduler counts them.

`model` (a pod's effective requests and limits, pod-level resources and in-place resize
included) over `pod_view` (the pod's JSON as the model reads it), `lifecycle` (which pods
count) and the `/metrics/resources` exposition kube-scheduler writes (`exposition_stream`,
the one writer, in bounded chunks, over `exposition`'s rows form for labels it cannot sort
as text). Here "resource" means a compute resource (cpu,
memory, extended resources); REST resources live in `..cluster` and `..api`. No I/O.
"""
