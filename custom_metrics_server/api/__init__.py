"""The served surface, pure: what the API looks like on the wire.

URL grammar of every served group version, content negotiation, JSON and Kubernetes protobuf
bodies, discovery documents, Status documents, the OpenAPI documents and the wire models they
are generated from. No I/O here: a request comes in as a path, a query and headers, an answer
goes out as bytes. The server (`..server`) does the sending.
"""
