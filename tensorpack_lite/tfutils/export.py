"""Export a model for inference without tensorpack_lite: a frozen ``GraphDef`` or a
``SavedModel``.

Both exports build the inference graph afresh from a :class:`PredictConfig`, the way
:class:`OfflinePredictor` does (one tower without name prefix, ``is_training`` False, built by
:func:`build_predict_tower`), create the session with ``config.session_creator`` and fill it
with ``config.session_init``.

Example::

    config = PredictConfig(model=MyModel(), input_names=['image'], output_names=['prob'],
                           session_init=SaverRestore('train_log/model-1000'))
    ModelExporter(config).export_compact('/tmp/model.pb')
    ModelExporter(config).export_serving('/tmp/exported')
    # later, anywhere (TF2):
    model = tf.saved_model.load('/tmp/exported')
    prob = model.signatures['serving_default'](image=images)['prob']
    # or as a client of a tensorpack export, with its signature and keys:
    prob = model.signatures['prediction_pipeline'](**{'image:0': images})['prob:0']
"""

import os
import shutil
from contextlib import contextmanager

from ..compat import enable_graph_mode, tf_internal, tfv1
from ..utils import logger
from ..utils.fs import write_atomically
from .common import check_tensor_names
from .inference_tower import build_predict_tower
from .sesscreate import create_initialized_session

__all__ = ['ModelExporter']


def _op_name(tensor):
    return tensor.name.rsplit(':', 1)[0]


def _keyword_name(name):
    """A name of the config as a key that is a Python keyword: ``'image:0'`` is ``'image'``."""
    return name[:-2] if name.endswith(':0') else name


def _predict_signature(input_keys, inputs, output_keys, outputs):
    info = tfv1.saved_model.utils.build_tensor_info
    return tfv1.saved_model.signature_def_utils.build_signature_def(
        inputs={k: info(t) for k, t in zip(input_keys, inputs)},
        outputs={k: info(t) for k, t in zip(output_keys, outputs)},
        method_name=tfv1.saved_model.PREDICT_METHOD_NAME)


_PREDICT_CONFIG_ATTRIBUTES = ('tower_func', 'input_names', 'output_names', 'session_creator',
                              'session_init', 'make_graph', 'input_tensors', 'output_tensors')


class ModelExporter(object):
    """Writes the inference graph of a :class:`PredictConfig`, with its variables' values, in
    formats TensorFlow loads without this library.

    The inputs of the export are ``config.input_names`` and its outputs
    ``config.output_names``.
    """

    def __init__(self, config):
        """
        Args:
            config (PredictConfig): the model, its input and output names and how to
                initialize its variables (``session_init``).
        """
        # (a PredictConfig is recognized by what it holds: predict sits above tfutils)
        if not all(hasattr(config, attr) for attr in _PREDICT_CONFIG_ATTRIBUTES):
            raise TypeError("ModelExporter takes a PredictConfig, got {!r}".format(config))
        enable_graph_mode()
        for arg in ('input_names', 'output_names'):     # the exported signature has one key per tensor
            check_tensor_names(getattr(config, arg), 'ModelExporter', 'PredictConfig.' + arg)
        self.config = config

    @contextmanager
    def _inference_session(self, before_session=None):
        """Build the inference graph and yield ``(sess, input_tensors, output_tensors, extra)``
        with the variables filled; ``extra`` is what ``before_session()`` returned (called in
        the graph before the session is created). The session is closed afterwards."""
        config = self.config
        graph = config.make_graph()
        with graph.as_default():
            tower = build_predict_tower(config.tower_func, reuse=False)
            inputs, outputs = config.input_tensors(tower), config.output_tensors(tower)
            extra = before_session() if before_session is not None else None
            sess = create_initialized_session(graph, config.session_creator, config.session_init,
                                              'ModelExporter')
            try:
                yield sess, inputs, outputs, extra
            finally:
                sess.close()

    def export_compact(self, filename, optimize=True, toco_compatible=False):
        """Write a self-contained inference ``GraphDef``: the variables become constants and
        only what the outputs need is kept.

        Load it with ``tf.compat.v1.import_graph_def`` and run the tensors of the input and
        output names (e.g. ``'image:0'``, ``'prob:0'``).

        Args:
            filename (str): the ``.pb`` file to write (replaced atomically when it exists).
            optimize (bool): also run TensorFlow's ``optimize_for_inference`` (removes
                training-only nodes, folds batch normalization...); it does not support
                every graph.
            toco_compatible (bool): passed to ``optimize_for_inference``: only make changes
                TFLite's converter supports.
        """
        optimize_for_inference_lib = tf_internal('python.tools.optimize_for_inference_lib')

        with self._inference_session() as (sess, inputs, outputs, _):
            output_ops = [_op_name(t) for t in outputs]
            graph_def = tfv1.graph_util.convert_variables_to_constants(
                sess, sess.graph.as_graph_def(), output_ops)
            if optimize:
                graph_def = optimize_for_inference_lib.optimize_for_inference(
                    graph_def, [_op_name(t) for t in inputs], output_ops,
                    [t.dtype.as_datatype_enum for t in inputs], toco_compatible)
        data = graph_def.SerializeToString()
        write_atomically(filename, lambda f: f.write(data))
        logger.info("ModelExporter: frozen graph written to {} (inputs {}, outputs {}).".format(
            filename, [t.name for t in inputs], [t.name for t in outputs]))

    def export_serving(self, filename, tags=(tfv1.saved_model.SERVING,),
                       signature_name='prediction_pipeline', keyword_signature_name='serving_default'):
        """Write a ``SavedModel`` directory (``saved_model.pb`` and ``variables/``) with two
        predict signatures of the same inputs and outputs:

        * ``signature_name`` (tensorpack's name and keys): keyed by tensor names
          (``'image:0'``, ``'prob:0'``), so a serving client written for a tensorpack export
          works unchanged. From TF2: ``fn(**{'image:0': x})['prob:0']`` (TensorFlow logs
          that it renames the parameter ``image_0``);
        * ``keyword_signature_name``: keyed by the config's names without ``:0``
          (``'image'``, ``'prob'``), for keyword calls from TF2,
          ``model.signatures['serving_default'](image=x)['prob']``. ``'serving_default'`` is
          the signature TensorFlow Serving and ``saved_model_cli`` use when none is named.
          None: left out.

        Load it with ``tf.saved_model.load(filename).signatures[...]`` (TF2) or
        ``tf.compat.v1.saved_model.loader.load(sess, tags, filename)`` (graph mode), or
        serve it with TensorFlow Serving.

        Args:
            filename (str): the directory to create; it must not exist. It is written under
                a temporary name and renamed when complete.
            tags (tuple[str]): the tags of the meta graph.
            signature_name (str): the key of the signature keyed by tensor names.
            keyword_signature_name (str): the key of the signature keyed by plain names, or None.
        """
        if signature_name == keyword_signature_name:
            raise ValueError("ModelExporter.export_serving: signature_name and keyword_signature_name are "
                             "both {!r}; the two signatures need two keys (or keyword_signature_name=None)"
                             .format(signature_name))
        if isinstance(tags, str):
            tags = (tags,)
        tags = list(tags)
        if not tags or not all(isinstance(t, str) for t in tags):
            raise TypeError("ModelExporter.export_serving: tags must be a non-empty tuple of str, "
                            "got {!r}".format(tags))
        if os.path.exists(filename):
            raise FileExistsError("ModelExporter.export_serving: '{}' exists; a SavedModel is "
                                  "written into a new directory.".format(filename))

        def make_saver():
            # made before the session: a session creator may finalize the graph
            return tfv1.train.Saver(sharded=True, allow_empty=True,
                                    write_version=tfv1.train.SaverDef.V2)

        tmp = '{}.tmp-{}'.format(filename.rstrip('/\\'), os.getpid())
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
        try:
            with self._inference_session(make_saver) as (sess, inputs, outputs, saver):
                signatures = {signature_name: _predict_signature(
                    [t.name for t in inputs], inputs, [t.name for t in outputs], outputs)}
                if keyword_signature_name is not None:
                    signatures[keyword_signature_name] = _predict_signature(
                        [_keyword_name(n) for n in self.config.input_names], inputs,
                        [_keyword_name(n) for n in self.config.output_names], outputs)
                builder = tfv1.saved_model.Builder(tmp)
                builder.add_meta_graph_and_variables(sess, tags, signature_def_map=signatures, saver=saver)
                builder.save()
            os.rename(tmp, filename)
        finally:
            if os.path.exists(tmp):
                shutil.rmtree(tmp)
        logger.info("ModelExporter: SavedModel written to {} (signatures {}, tags {}).".format(
            filename, sorted(signatures), tags))
