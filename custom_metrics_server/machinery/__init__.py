"""Pure ports of Kubernetes machinery, exact to the Go code they follow.

`resource.Quantity`, label and field selectors, Go and Prometheus durations. Each is a drop-in
for its apimachinery counterpart: same accepted inputs, same canonical strings, same error
messages. Beside them, two pure primitives the rooms above share: `promtext` (the Prometheus
text format's Go float and label-value spelling: the kubelet writer and the KEP-1748
exposition) and `journal` (the change log of a store: the cluster state, the usage store and
the memoised answers over them).
"""
