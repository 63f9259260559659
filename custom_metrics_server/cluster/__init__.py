"""The in-memory cluster view: REST mapping (`{resource}` strings to group, version, kind and
scope) and the object index (objects by group-resource and namespace, with label postings for
selectors). Backends and the query layer read it; watches and fixtures feed it.
"""
