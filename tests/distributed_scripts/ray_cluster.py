"""A local Ray cluster in a process of its own, for tests/cluster/test_ray.py (Ray's cluster
utilities: a head without CPUs and ``--nodes`` nodes of one CPU each). Ray's nodes install their
own signal handlers and start threads in the process that starts them: here, not in pytest's.

    python ray_cluster.py [--nodes N]

It answers on stdout, one JSON object a line: first ``{"address": "HOST:PORT"}`` once the nodes
are up, then one answer per request read from stdin, one JSON object a line:

- ``{"op": "add_node", "num_cpus": 1}``: ``{"node_id": ...}``, the new node's id;
- ``{"op": "remove_node", "node_id": ...}``: ``{}``, once the node is stopped;
- ``{"op": "shutdown"}`` or the end of stdin (its parent ended): stops the cluster and exits.

A request that fails is answered ``{"error": "..."}``. What Ray prints goes to stderr.
"""

import argparse
import json
import os
import sys
import traceback

from ray.cluster_utils import Cluster


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--nodes', type=int, default=2)
    args = parser.parse_args(argv)
    answers = os.fdopen(os.dup(1), 'w', buffering=1)
    os.dup2(2, 1)                # whatever else is printed goes to stderr, not into the answers

    def answer(message):
        answers.write(json.dumps(message) + '\n')

    cluster = Cluster(initialize_head=True, head_node_args={'num_cpus': 0, 'include_dashboard': False})
    try:
        for _ in range(args.nodes):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        answer({'address': cluster.address})
        for line in sys.stdin:
            request = json.loads(line)
            if request['op'] == 'shutdown':
                break
            try:
                if request['op'] == 'add_node':
                    node = cluster.add_node(num_cpus=request.get('num_cpus', 1))
                    cluster.wait_for_nodes()
                    answer({'node_id': node.node_id})
                elif request['op'] == 'remove_node':
                    node = next(n for n in cluster.list_all_nodes() if n.node_id == request['node_id'])
                    cluster.remove_node(node)
                    answer({})
                else:
                    answer({'error': 'no such request: {!r}'.format(request)})
            except Exception:  # the test shows it
                answer({'error': traceback.format_exc()})
    finally:
        cluster.shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
