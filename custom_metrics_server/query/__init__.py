"""Request semantics: from a parsed metric request to samples.

One layer owns what a request means (REST mapping, scope, `*` and the label selector resolved to
objects, the backend that owns the metric, the not-found policy, the backend deadline), so that
backends stay small. It sees backends only through the contract in `..sdk`.
"""
