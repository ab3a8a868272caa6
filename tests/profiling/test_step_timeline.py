"""StepTimeline and CommunicationTimeline: when gradients became ready and when the
collectives carrying them ran, read from a traced step (virtual CPU towers)."""

import glob
import json
import logging
import os
import re
import xml.etree.ElementTree as ElementTree

import numpy as np
import pytest

from tensorpack_lite.callbacks import CommunicationTimeline, EnableCallbackIf
from tensorpack_lite.cluster.config import local_cluster
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.graph_builder.distributed import CollectiveAllReduceBuilder
from tensorpack_lite.input_source import QueueInput
from tensorpack_lite.multiprocess.server import create_server
from tensorpack_lite.profiling.step_timeline import StepTimeline, is_communication_op
from tensorpack_lite.tfutils.common import get_default_sess_config
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.train import SyncMultiGPUTrainerReplicated, TrainConfig, launch_train_with_config

from helpers.models import MLP
from helpers.process_guard import starts_tensorflow_server_here

pytestmark = starts_tensorflow_server_here   # servers made in this process

LAYERS = (16, 300, 200, 8)
"""The MLP's layers (helpers.models.MLP, softmax cross-entropy): 66.6 k parameters."""


def parameter_bytes():
    return 4 * sum(a * b + b for a, b in zip(LAYERS, LAYERS[1:]))


def check_pieces(pieces, step):
    for piece in pieces:
        assert piece['sources'], piece['name']
        assert all('gradients' in name for name in piece['sources']), piece
        assert 0.0 <= piece['ready'] <= piece['start'] <= piece['end'] <= step + 1e-6, piece


def test_communication_timeline_of_a_replicated_step_on_two_virtual_cpus(logdir, log_records):
    rng = np.random.RandomState(0)
    data = [[rng.randn(4, LAYERS[0]).astype('float32'), rng.randint(0, LAYERS[-1], 4).astype('int32')]
            for _ in range(8)]
    config = get_default_sess_config()
    config.device_count['CPU'] = 2
    launch_train_with_config(TrainConfig(
        model=MLP(LAYERS), data=QueueInput(DataFromList(data, shuffle=False)),
        callbacks=[EnableCallbackIf(CommunicationTimeline(), lambda self: self.trainer.global_step == 1)],
        session_creator=NewSessionCreator(config=config), steps_per_epoch=3, max_epoch=1),
        SyncMultiGPUTrainerReplicated(['/cpu:0', '/cpu:1'], mode='collective'))

    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(logdir, 'timeline-*')))
    assert names == ['timeline-2.json', 'timeline-2.svg']            # the one traced step
    assert glob.glob(os.path.join(logdir, 'chrome-trace-2.json'))
    with open(os.path.join(logdir, 'timeline-2.json')) as f:
        timeline = json.load(f)
    summary, pieces = timeline['summary'], timeline['pieces']
    # mode='collective' packs with GradientPacker (one concat of a tower's 6 gradients, split in
    # 2): 2 all-reduces per tower, each of which walks back to all 6 gradients of its tower
    assert len(pieces) == 2 * 2 and all(p['type'] == 'CollectiveReduceV2' for p in pieces)
    for tower in ('tower0', 'tower1'):
        mine = [p for p in pieces if p['sources'][0].startswith(tower + '/')]
        assert len(mine) == 2 and all(len(set(p['sources'])) == 6 for p in mine), mine
        assert all(name.startswith(tower + '/gradients/') for p in mine for name in p['sources'])
    assert sum(p['bytes'] for p in pieces) == 2 * parameter_bytes()
    check_pieces(pieces, summary['step'])
    assert summary['pieces'] == 4 and summary['bytes'] == 2 * parameter_bytes()
    assert 0.0 <= summary['overlapped'] <= summary['communication'] <= summary['step']
    assert summary['first_ready'] <= summary['last_ready'] == max(p['ready'] for p in pieces)

    picture = ElementTree.parse(os.path.join(logdir, 'timeline-2.svg')).getroot()
    texts = [t.text for t in picture.iter('{http://www.w3.org/2000/svg}text')]
    assert texts[0].startswith('step 2: ')
    labels = [t for t in texts if t and t.startswith('piece ')]
    assert len(labels) == len(pieces)
    assert all(re.fullmatch(r'piece \d: 0\.13 MB, 6 source\(s\)', label) for label in labels), labels
    assert sum(1 for _ in picture.iter('{http://www.w3.org/2000/svg}rect')) > len(pieces)
    logged = [m for m in log_records.messages(logging.INFO)
              if m.startswith('CommunicationTimeline: step 2 took')]
    assert len(logged) == 1 and '4 pieces ({:.2f} MB)'.format(2 * parameter_bytes() / 1e6) in logged[0]


def test_the_pieces_of_packed_gradients_name_every_gradient_they_carry():
    """CollectiveAllReduceBuilder on 2 virtual CPU towers packs small gradients into pieces
    (concat, reshape): walking back through them finds every gradient of each tower."""
    server = create_server(local_cluster(1), 'worker', 0, config=tfv1.ConfigProto(device_count={'CPU': 2}))
    builder = CollectiveAllReduceBuilder(['/cpu:0', '/cpu:1'], server, average=True)
    builder.CHUNK_BYTES = 200 * 300 * 4 // 2                 # fc1/W in 2 pieces; the rest packed
    model, grads = MLP(LAYERS), []
    x = tf.random.normal([4, LAYERS[0]], seed=3)
    label = tf.constant([0, 1, 2, 3])
    for tower, device in enumerate(['/cpu:0', '/cpu:1']):
        with tf.device(device), tfv1.variable_scope('tower{}'.format(tower)):
            cost = model.build_graph(x * (tower + 1), label)
            grads.append(tf.gradients(cost, tfv1.trainable_variables('tower{}'.format(tower))))
    reduced = builder.all_reduce(grads)
    meta = tfv1.RunMetadata()
    with tfv1.Session(server.target) as sess:
        sess.run(tfv1.global_variables_initializer())
        sess.run(reduced, options=tfv1.RunOptions(trace_level=tfv1.RunOptions.FULL_TRACE), run_metadata=meta)
    timeline = StepTimeline(sess.graph, meta.step_stats)
    check_pieces(timeline.to_dict()['pieces'], timeline.duration)
    for tower in range(2):
        mine = [p for p in timeline.pieces if p.span.thread.startswith('device:CPU:{} #'.format(tower))]
        # each gradient by the op computing it (a bias's gradient is a Reshape of a Sum: the Sum)
        assert {s.name for p in mine for s in p.sources} == \
            {(g.op.inputs[0].op if g.op.type == 'Reshape' else g.op).name for g in grads[tower]}
        assert parameter_bytes() <= sum(p.bytes for p in mine) < parameter_bytes() + 64 * 6   # + alignment
    assert len(timeline.pieces) == 2 * 3        # per tower: fc1/W in 2, the pack of the others
    assert timeline.spans == sorted(timeline.spans, key=lambda s: (s.start, s.end))


def test_communication_ops_are_collectives_and_the_mpi_engines_named_functions():
    with tf.Graph().as_default():
        x = tf.zeros([3])
        mpi = tf.numpy_function(lambda a: a, [x], [tf.float32], name='AllReduce/MPIAllreduce')[0]
        other = tf.numpy_function(lambda a: a, [x], [tf.float32], name='decode')[0]
        collective = tf.raw_ops.CollectiveReduceV2(
            input=x, group_size=1, group_key=1, instance_key=1, ordering_token=[], merge_op='Add',
            final_op='Id')
        assert [is_communication_op(t.op) for t in (mpi, other, collective, x)] == [True, False, True, False]


def test_a_step_that_was_not_traced_is_refused_saying_why():
    with pytest.raises(ValueError, match='FULL_TRACE'):
        StepTimeline(tf.Graph(), tfv1.RunMetadata().step_stats)
