"""The running API server.

The composition root (`app.create_app`), the handler chain every request passes, the `/apis`
endpoints, the cold routes (health, version, self-metrics, OpenAPI) and the self-metrics. The
only room that knows every other one; nothing imports it but the command line.
"""
