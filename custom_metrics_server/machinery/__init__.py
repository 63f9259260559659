"""Pure ports of Kubernetes machinery, exact to the Go code they follow.

`resource.Quantity`, label and field selectors, Go and Prometheus durations. Each is a drop-in
for its apimachinery counterpart: same accepted inputs, same canonical strings, same error
messages.
"""
