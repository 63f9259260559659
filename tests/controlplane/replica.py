"""`python -m tests.controlplane.replica serve ...`: the server's command line with the host
name a pod would have, `$CMS_REPLICA_NAME` (a pod's host name is its name). Out of cluster,
two replicas on one machine would otherwise share a host name, which is their Lease identity.
"""

import os
import socket
import sys

from custom_metrics_server.cli import main

_name = os.environ["CMS_REPLICA_NAME"]
socket.gethostname = lambda: _name

sys.exit(main())
