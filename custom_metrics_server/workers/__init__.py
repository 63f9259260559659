"""`serve --workers N`: N worker processes serving one port, and the main process above them.

A worker is this program again, running the whole server (its own backend instances, the
same handler chain, its own delegated-auth caches) on the port, which every worker binds with
`SO_REUSEPORT` so that the kernel spreads new connections over them. That is only right when
every backend is *replicable* (`plugins.replicas`): `plan` decides, from the loaded backends,
whether workers run at all (else this process serves alone, and says so in one line).
`supervisor` is the main process: it reserves the port, starts the workers, replaces the ones
that die and stops them in order; it serves nothing and starts no backend. `worker` is a
worker's entry.

The main process and each worker share one Unix socket pair (inherited, nothing on disk): the
worker writes one line once it listens (the main process's start-up waits for every worker's),
and each side reads end-of-file when the other is gone (a worker then exits).
"""
