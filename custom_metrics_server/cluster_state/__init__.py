"""The cluster state fed by watches: compact records of pods, nodes and workloads.

`records.ClusterState` (an `InMemoryCluster` that also keeps, per pod, what KEP-1748 needs),
built from `record_inputs` over the schema-decoded objects of `wire_objects` (msgspec) or
plain dicts, with `resource_shapes` computing the resource model once per distinct shape. It
sits above `..kube` (it decodes with `kube.wire_codec`), which itself sits above `..cluster`
(live discovery fills the REST mapper), so it is a room of its own rather than part of
`..cluster` (docs/architecture.md, "Tiers").
"""
