"""Generated Python modules of the trimmed CRI API (``api.proto`` beside this file).

Regenerate with ``make generate-cri``; never edit the ``api_pb2*`` files by hand.
"""
