"""When gradients became ready and when the collectives carrying them ran, in one traced step.

:class:`StepTimeline` reads the ``step_stats`` of a ``session.run`` traced with
``RunOptions.FULL_TRACE`` (what :class:`~tensorpack_lite.callbacks.GraphProfiler` records) with
the graph that ran. Every communication op (:func:`is_communication_op`: TensorFlow's
collectives, NCCL, Horovod's and the MPI engine's ops) is a *piece*; its *sources* are the ops
found by walking back from its inputs through ops that only move bytes (:data:`LAYOUT_OP_TYPES`:
concat, reshape, slice, cast...): the ops computing the gradients packed into it (a gradient that
is itself a reshape, as a bias's, is named by the op before it). A piece is *ready* when its last
source has run; how long it then waited, how long it ran, and how much of the communication
ran while backprop still produced gradients is what :meth:`StepTimeline.summary` reports and
:meth:`StepTimeline.to_svg` draws.

Example::

    meta = tfv1.RunMetadata()
    sess.run(train_op, options=tfv1.RunOptions(trace_level=tfv1.RunOptions.FULL_TRACE), run_metadata=meta)
    timeline = StepTimeline(sess.graph, meta.step_stats)
    print(timeline.summary())
    with open('timeline.svg', 'w') as f:
        f.write(timeline.to_svg())
"""

import collections
import html

__all__ = ['StepTimeline', 'Span', 'Piece', 'is_communication_op', 'COMMUNICATION_OP_TYPES',
           'LAYOUT_OP_TYPES']

COMMUNICATION_OP_TYPES = frozenset([
    'CollectiveReduce', 'CollectiveReduceV2', 'CollectiveReduceV3', 'CollectiveGather', 'CollectiveGatherV2',
    'CollectiveBcastSend', 'CollectiveBcastSendV2', 'CollectiveBcastRecv', 'CollectiveBcastRecvV2',
    'CollectiveAllToAllV2', 'CollectiveAllToAllV3', 'NcclAllReduce', 'HorovodAllreduce',
    'HorovodGroupedAllreduce', 'HorovodAllgather', 'HorovodBroadcast'])
"""Op types that move tensors between devices or processes."""

LAYOUT_OP_TYPES = frozenset(['ConcatV2', 'Concat', 'Reshape', 'StridedSlice', 'Slice', 'Identity', 'Cast',
                             'Pack', 'Split', 'SplitV', 'Squeeze', 'ExpandDims', 'BitCast'])
"""Op types that pack tensors for a collective without computing: walked through to its sources."""


def is_communication_op(op):
    """True for an op of :data:`COMMUNICATION_OP_TYPES`, or one of the MPI engine's
    (``tf.numpy_function`` ops named ``MPI...``, see :mod:`~tensorpack_lite.graph_builder.mpi_ops`)."""
    if op.type in COMMUNICATION_OP_TYPES:
        return True
    return op.type in ('PyFunc', 'EagerPyFunc') and op.name.rsplit('/', 1)[-1].startswith('MPI')


class Span(collections.namedtuple('Span', 'name type thread start end')):
    """One op's run: ``start`` and ``end`` in seconds from the step's first op."""

    __slots__ = ()

    @property
    def duration(self):
        return self.end - self.start


class Piece(collections.namedtuple('Piece', 'span sources bytes')):
    """A communication op's :class:`Span`, the spans of its sources (those that ran in the
    step) and the bytes of its inputs."""

    __slots__ = ()

    @property
    def ready(self):
        """When its last source ended (its own start when none ran in the step)."""
        return max((s.end for s in self.sources), default=self.span.start)


def _union_length(intervals):
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total, reach = total + end - start, end
        elif end > reach:
            total, reach = total + end - reach, end
    return total


def _data_inputs(op):
    """The tensors a communication op moves: a collective's first input (the others are its
    keys and sizes), every input of the others."""
    return list(op.inputs[:1]) if op.type.startswith('Collective') else list(op.inputs)


def _sources(op):
    found, stack, seen = [], [tensor.op for tensor in _data_inputs(op)], set()
    while stack:
        before = stack.pop()
        if before in seen:
            continue
        seen.add(before)
        if before.type in LAYOUT_OP_TYPES:
            stack.extend(tensor.op for tensor in before.inputs)
        elif before.inputs:                      # constants (a pack's zero padding) are no source
            found.append(before)
    return found


def _bytes(op):
    total = 0
    for tensor in _data_inputs(op):
        elements = tensor.shape.num_elements()
        if elements is not None and tensor.dtype.is_numpy_compatible:
            total += elements * tensor.dtype.size
    return total


class StepTimeline:
    """The ops of one traced step, and its communication pieces (see the module's text).

    Args:
        graph (tf.Graph): the graph that ran.
        step_stats: ``RunMetadata.step_stats`` of the step.
        device_filter (callable): ``device name -> bool``, the devices to read (default: all).

    Attributes:
        spans (list[Span]): every op that ran, by start.
        pieces (list[Piece]): the communication ops that ran, by start.
    """

    def __init__(self, graph, step_stats, device_filter=None):
        nodes = [(dev.device, node) for dev in step_stats.dev_stats
                 if device_filter is None or device_filter(dev.device) for node in dev.node_stats
                 if not node.node_name.startswith('_')]
        if not nodes:
            raise ValueError("StepTimeline: the step stats hold no op{}; was the run traced with "
                             "RunOptions.FULL_TRACE?".format(' of the devices kept' if device_filter else ''))
        origin = min(node.all_start_micros for _, node in nodes)
        ops = {}
        self.spans = []
        for device, node in nodes:
            name = node.node_name.split(':')[0]
            try:
                op = graph.get_operation_by_name(name)
            except (KeyError, ValueError):
                op = None
            start = (node.all_start_micros - origin) / 1e6
            span = Span(name, op.type if op is not None else '', '{} #{}'.format(device.rsplit('/', 2)[-1],
                                                                                 node.thread_id),
                        start, start + max(node.all_end_rel_micros, 0) / 1e6)
            self.spans.append(span)
            if op is not None:
                ops[name] = (op, span)
        self.spans.sort(key=lambda s: (s.start, s.end))
        self.pieces = []
        for name, (op, span) in ops.items():
            if is_communication_op(op):
                sources = [ops[o.name][1] for o in _sources(op) if o.name in ops]
                self.pieces.append(Piece(span, sorted(sources, key=lambda s: s.end), _bytes(op)))
        self.pieces.sort(key=lambda p: (p.span.start, p.span.name))

    @property
    def duration(self):
        """Seconds from the first op's start to the last op's end."""
        return max(s.end for s in self.spans)

    def summary(self):
        """A dict: ``step`` (s), ``pieces`` (count), ``bytes``, ``first_ready`` and
        ``last_ready`` (when the first and the last piece became ready), ``communication`` (s
        during which at least one piece ran), ``overlapped`` (of those, the seconds before the
        last piece was ready: communication hidden behind the computing of gradients),
        ``waited`` (the longest a ready piece waited to start) and ``after_compute`` (s from the
        last piece's readiness to the end of the last communication)."""
        if not self.pieces:
            return {'step': self.duration, 'pieces': 0, 'bytes': 0}
        ready = [p.ready for p in self.pieces]
        last_ready = max(ready)
        intervals = [(p.span.start, p.span.end) for p in self.pieces]
        before = [(start, min(end, last_ready)) for start, end in intervals if start < last_ready]
        return {'step': self.duration, 'pieces': len(self.pieces), 'bytes': sum(p.bytes for p in self.pieces),
                'first_ready': min(ready), 'last_ready': last_ready,
                'communication': _union_length(intervals), 'overlapped': _union_length(before),
                'waited': max(max(p.span.start - p.ready, 0.0) for p in self.pieces),
                'after_compute': max(p.span.end for p in self.pieces) - last_ready}

    def to_dict(self):
        """The :meth:`summary` and the pieces (name, bytes, ready, start, end, sources), for JSON."""
        return {'summary': self.summary(),
                'pieces': [{'name': p.span.name, 'type': p.span.type, 'bytes': p.bytes, 'ready': p.ready,
                            'start': p.span.start, 'end': p.span.end, 'sources': [s.name for s in p.sources]}
                           for p in self.pieces]}

    def to_svg(self, width=1400, title=None):
        """An SVG picture of the step: a row of ops per thread (blue: the graph's ops; red:
        communication ops; orange: the runtime's own work, such as the ring's ``RecvBuf``), the
        gradients' ready times, and a row per piece (a light bar from ready to start: waiting; a
        dark bar: running). Hovering over a bar names it."""
        return _SvgPicture(self, width, title).render()


class _SvgPicture:
    LEFT, ROW, TOP = 230, 18, 58

    def __init__(self, timeline, width, title):
        self.timeline, self.width, self.title = timeline, width, title
        self.scale = (width - self.LEFT - 20) / max(timeline.duration, 1e-6)
        self.parts = []

    def x(self, seconds):
        return self.LEFT + seconds * self.scale

    def bar(self, row_y, start, end, fill, tip, height=None):
        self.parts.append('<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{}" fill="{}"><title>{}</title>'
                          '</rect>'.format(self.x(start), row_y + 2, max((end - start) * self.scale, 0.6),
                                           height or self.ROW - 4, fill, html.escape(tip)))

    def label(self, row_y, text, x=6, anchor='start', size=11):
        self.parts.append('<text x="{}" y="{:.1f}" font-size="{}" text-anchor="{}">{}</text>'.format(
            x, row_y + self.ROW - 5, size, anchor, html.escape(text)))

    def render(self):
        timeline, summary = self.timeline, self.timeline.summary()
        threads = sorted({s.thread for s in timeline.spans})
        piece_names = {p.span.name for p in timeline.pieces}
        y = self.TOP
        for thread in threads:
            self.label(y, 'ops, ' + thread)
            for s in timeline.spans:
                if s.thread == thread:
                    colour = '#d62728' if s.name in piece_names else '#4c78a8' if s.type else '#f2a541'
                    self.bar(y, s.start, s.end, colour, '{} ({}): {:.2f}-{:.2f} ms'.format(
                        s.name, s.type or "the runtime's, not the graph's", s.start * 1e3, s.end * 1e3))
            y += self.ROW
        self.label(y, 'gradients ready')
        for piece in timeline.pieces:
            for source in piece.sources:
                self.bar(y, source.end, source.end, '#2ca02c', '{} ready at {:.2f} ms'.format(
                    source.name, source.end * 1e3))
        y += self.ROW
        for number, piece in enumerate(timeline.pieces):
            self.label(y, 'piece {}: {:.2f} MB, {} source(s)'.format(number, piece.bytes / 1e6,
                                                                     len(piece.sources)))
            tip = '{}: ready {:.2f} ms, ran {:.2f}-{:.2f} ms; sources: {}'.format(
                piece.span.name, piece.ready * 1e3, piece.span.start * 1e3, piece.span.end * 1e3,
                ', '.join(s.name for s in piece.sources[-8:]))
            if piece.span.start > piece.ready:
                self.bar(y, piece.ready, piece.span.start, '#f4b6b6', tip)
            self.bar(y, piece.span.start, piece.span.end, '#d62728', tip)
            y += self.ROW
        self.axis(y)
        head = [self.title or 'one step', '{:.1f} ms'.format(summary['step'] * 1e3)]
        if summary['pieces']:
            head.append('{} pieces, {:.2f} MB; communication {:.1f} ms, {:.1f} ms of it before the last '
                        'gradient was ready ({:.1f} ms); then {:.1f} ms more'.format(
                            summary['pieces'], summary['bytes'] / 1e6, summary['communication'] * 1e3,
                            summary['overlapped'] * 1e3, summary['last_ready'] * 1e3,
                            summary['after_compute'] * 1e3))
        self.parts.insert(0, '<text x="6" y="20" font-size="14" font-weight="bold">{}</text>'.format(
            html.escape(head[0] + ': ' + head[1])))
        if len(head) > 2:
            self.parts.insert(1, '<text x="6" y="40" font-size="12">{}</text>'.format(html.escape(head[2])))
        height = y + 40
        return ('<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
                'font-family="sans-serif">\n<rect width="{w}" height="{h}" fill="white"/>\n{body}\n</svg>\n'
                ).format(w=self.width, h=height, body='\n'.join(self.parts))

    def axis(self, y):
        duration = self.timeline.duration
        step = 10 ** max(len(str(int(duration * 1e3 / 5))) - 1, 0) / 1e3
        while duration / step > 12:
            step *= 2
        tick = 0.0
        while tick <= duration + 1e-12:
            self.parts.append('<line x1="{0:.1f}" x2="{0:.1f}" y1="{1}" y2="{2}" stroke="#ccc"/>'.format(
                self.x(tick), self.TOP, y))
            self.parts.append('<text x="{:.1f}" y="{}" font-size="10" text-anchor="middle">{:g} ms'
                              '</text>'.format(self.x(tick), y + 14, round(tick * 1e3, 3)))
            tick += step
