"""Backends as plugins: finding a backend type, validating its settings, making it, adapting
what it has to the server's full backend protocol, and keeping the backends file in force.

The room sits above every backend (it makes the built-in ones too) and below the server (which
serves what it loads). It decides nothing about requests: routing is the query layer's, and the
contract plugins implement is the SDK's (docs/backends.md).
"""
