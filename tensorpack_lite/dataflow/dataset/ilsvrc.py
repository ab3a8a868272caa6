"""ImageNet: ILSVRC12 (its images and caffe's meta files) and TinyImageNet, read from the
directories the official archives extract to.

It also holds :func:`read_caffe_blob`, a reader of caffe's ``.binaryproto`` blobs (the ImageNet
mean image) that needs neither caffe nor protobuf.
"""

import os
import xml.etree.ElementTree as ElementTree

import numpy as np

from ...utils import logger
from ...utils.argtools import shape2d
from ...utils.develop import import_optional
from ...utils.protowire import FIXED32, FIXED64, LENGTH_DELIMITED, VARINT, message_fields, packed_varints
from ..image import ImageFileLabelData, read_image
from .common import find_dataset_file, get_dataset_path

__all__ = ['ILSVRCMeta', 'ILSVRC12Files', 'ILSVRC12', 'TinyImageNet', 'read_caffe_blob']

_SPLITS = ('train', 'val', 'test')
_DIR_STRUCTURES = ('original', 'train')


# ----- caffe's BlobProto, read from the protobuf wire format ---------------------------------------
# message BlobProto { optional int32 num = 1, channels = 2, height = 3, width = 4;
#                     repeated float data = 5 [packed]; optional BlobShape shape = 7;
#                     repeated double double_data = 8 [packed]; ... }
# message BlobShape { repeated int64 dim = 1 [packed]; }

def _repeated_numbers(chunks, wire_type, value, dtype, fixed_wire_type):
    """Append to ``chunks`` the numbers of one (packed or unpacked) occurrence of a float field."""
    if wire_type not in (LENGTH_DELIMITED, fixed_wire_type) or len(value) % np.dtype(dtype).itemsize:
        raise ValueError("malformed {} values".format(np.dtype(dtype).name))
    chunks.append(np.frombuffer(value, dtype=dtype))


def read_caffe_blob(path):
    """The array of a caffe ``BlobProto`` file (e.g. ``imagenet_mean.binaryproto``).

    The shape is the blob's ``shape`` field, or else its legacy (num, channels, height, width).

    Returns:
        np.ndarray: float32.

    Raises:
        ValueError: naming ``path`` when it is not a readable BlobProto.
    """
    with open(path, 'rb') as f:
        buf = f.read()
    floats, doubles, legacy, dims = [], [], {}, None
    try:
        for number, wire_type, value in message_fields(buf):
            if number == 5:
                _repeated_numbers(floats, wire_type, value, '<f4', FIXED32)
            elif number == 8:
                _repeated_numbers(doubles, wire_type, value, '<f8', FIXED64)
            elif number in (1, 2, 3, 4) and wire_type == VARINT:
                legacy[number] = value
            elif number == 7 and wire_type == LENGTH_DELIMITED:
                dims = []
                for dim_number, dim_wire_type, dim in message_fields(value):
                    if dim_number == 1:
                        dims.extend(packed_varints(dim) if dim_wire_type == LENGTH_DELIMITED else [dim])
    except ValueError as err:
        raise ValueError("'{}' is not a valid caffe BlobProto file: {}.".format(path, err)) from None
    data = np.concatenate(floats or doubles or [np.zeros(0, np.float32)]).astype(np.float32)
    shape = dims if dims is not None else [legacy.get(k, 0) for k in (1, 2, 3, 4)]
    if int(np.prod(shape)) != data.size:
        raise ValueError("'{}' is not a valid caffe BlobProto file: its shape {} does not match its {} "
                         "values.".format(path, tuple(shape), data.size))
    return data.reshape(shape)


# ----- ILSVRC12 --------------------------------------------------------------------------------

def _check_choice(owner, argument, value, choices):
    if value not in choices:
        raise ValueError("{}: {} must be one of {}, got {!r}.".format(owner, argument, choices, value))


def _read_lines(path):
    """``(line number, stripped line)`` of each non-blank line of the text file ``path``."""
    with open(path) as f:
        return [(number, line.strip()) for number, line in enumerate(f, 1) if line.strip()]


def _missing_directory(owner, path, what):
    return FileNotFoundError("{}: the directory '{}' does not exist. It should hold {} (nothing is "
                             "downloaded; see docs/datasets.md).".format(owner, path, what))


class ILSVRCMeta(object):
    """The meta files of ILSVRC12 that caffe publishes (``caffe_ilsvrc12.tar.gz``, extracted):
    ``synsets.txt``, ``synset_words.txt``, ``train.txt``, ``val.txt``, ``test.txt`` and
    ``imagenet_mean.binaryproto``. Labels are line numbers (from 0) in ``synsets.txt``.

    Args:
        dir (str): the directory of the files; defaults to ``$TENSORPACK_DATASET/ilsvrc_metadata``.

    Example::

        meta = ILSVRCMeta('/data/ilsvrc_metadata')
        meta.get_synset_words_1000()[0]     # 'n01440764 tench, Tinca tinca'
    """

    WHERE_TO_GET = ("download http://dl.caffe.berkeleyvision.org/caffe_ilsvrc12.tar.gz and extract it "
                    "into the directory (ILSVRCMeta's dir, or meta_dir of ILSVRC12)")

    def __init__(self, dir=None):
        self.dir = get_dataset_path('ilsvrc_metadata') if dir is None else os.path.expanduser(dir)
        self._file('synsets.txt')

    def _file(self, name):
        return find_dataset_file(self.dir, [name], 'ILSVRCMeta', self.WHERE_TO_GET)

    def _lines(self, name):
        return [line for _, line in _read_lines(self._file(name))]

    def get_synset_words_1000(self):
        """``{label: line of synset_words.txt}``, e.g. ``{0: 'n01440764 tench, Tinca tinca', ...}``."""
        return dict(enumerate(self._lines('synset_words.txt')))

    def get_synset_1000(self):
        """``{label: synset id}``, e.g. ``{0: 'n01440764', ...}``."""
        return dict(enumerate(self._lines('synsets.txt')))

    def get_image_list(self, name, dir_structure='original'):
        """The ``(image path relative to dir/name, label)`` of each image of a split, in the order
        of ``<name>.txt``.

        Args:
            name (str): 'train', 'val' or 'test'.
            dir_structure (str): 'original' or 'train', as in :class:`ILSVRC12`: with 'train', the
                val/test images are in one directory per synset.
        """
        _check_choice('ILSVRCMeta.get_image_list', 'name', name, _SPLITS)
        _check_choice('ILSVRCMeta.get_image_list', 'dir_structure', dir_structure, _DIR_STRUCTURES)
        synsets = self.get_synset_1000() if name != 'train' and dir_structure == 'train' else None
        path = self._file(name + '.txt')
        ret = []
        for number, line in _read_lines(path):
            fields = line.split()
            if len(fields) != 2 or not fields[1].isdigit():
                raise ValueError("ILSVRCMeta: line {} of '{}' should be '<image> <label>', got {!r}."
                                 .format(number, path, line))
            fname, label = fields[0], int(fields[1])
            if synsets is not None:
                if label not in synsets:
                    raise ValueError("ILSVRCMeta: line {} of '{}' has label {}, which synsets.txt "
                                     "does not have.".format(number, path, label))
                fname = os.path.join(synsets[label], fname)
            ret.append((fname, label))
        if not ret:
            raise ValueError("ILSVRCMeta: '{}' lists no image.".format(path))
        return ret

    def get_per_pixel_mean(self, size=None):
        """The mean image of ImageNet, from ``imagenet_mean.binaryproto``.

        Args:
            size (int or (h, w)): resize it (bilinear) to this size; by default it is 256x256.

        Returns:
            np.ndarray: float32, (h, w, 3) in BGR order, values in [0, 255].
        """
        path = self._file('imagenet_mean.binaryproto')
        blob = read_caffe_blob(path)
        if blob.ndim < 3 or blob.shape[-3] != 3 or any(d != 1 for d in blob.shape[:-3]):
            raise ValueError("ILSVRCMeta: '{}' should hold one 3-channel image, got a blob of shape {}."
                             .format(path, blob.shape))
        mean = np.ascontiguousarray(blob.reshape(blob.shape[-3:]).transpose(1, 2, 0))
        if size is not None:
            height, width = shape2d(size)
            cv2 = import_optional('cv2', extra='image', purpose='ILSVRCMeta.get_per_pixel_mean(size=...)')
            mean = cv2.resize(mean, (width, height))
        return mean

    @staticmethod
    def guess_dir_structure(dir):
        """'train' when the directory ``dir`` (e.g. ``/data/imagenet/val``) has subdirectories named
        like synsets (``n01440764``), else 'original'."""
        by_synset = any(entry.startswith('n') and os.path.isdir(os.path.join(dir, entry))
                        for entry in sorted(os.listdir(dir)))
        structure = 'train' if by_synset else 'original'
        logger.info("ILSVRC12: assuming the directory {} has the '{}' structure.".format(dir, structure))
        return structure


class ILSVRC12Files(ImageFileLabelData):
    """Produces ``[filename, label]`` for the images of ILSVRC12: as :class:`ILSVRC12`, but with the
    full path of the image instead of the image, to decode it elsewhere (e.g. in parallel).

    Args: as in :class:`ILSVRC12`.
    """

    def __init__(self, dir, name, meta_dir=None, shuffle=None, dir_structure=None):
        owner = type(self).__name__
        _check_choice(owner, 'name', name, _SPLITS)
        if dir_structure is not None:
            _check_choice(owner, 'dir_structure', dir_structure, _DIR_STRUCTURES)
        dir = os.path.expanduser(dir)
        self.full_dir = os.path.join(dir, name)
        if not os.path.isdir(self.full_dir):
            raise _missing_directory(owner, self.full_dir, "the {} images of ILSVRC12 "
                                     "(ILSVRC2012_img_{}.tar, extracted)".format(name, name))
        if meta_dir is not None and not os.path.isdir(os.path.expanduser(meta_dir)):
            raise _missing_directory(owner, meta_dir, "caffe's ILSVRC12 meta files (caffe_ilsvrc12.tar.gz)")
        self.name = name
        if name == 'train':
            dir_structure = 'train'
        elif dir_structure is None:
            dir_structure = ILSVRCMeta.guess_dir_structure(self.full_dir)
        imglist = ILSVRCMeta(meta_dir).get_image_list(name, dir_structure)
        for fname, _ in imglist[:10]:
            path = os.path.join(self.full_dir, fname)
            if not os.path.isfile(path):
                raise FileNotFoundError(
                    "{}: the image file '{}' does not exist (dir_structure is '{}': 'original' expects the "
                    "val/test images directly in {}/, 'train' one directory per synset).".format(
                        owner, path, dir_structure, name))
        super(ILSVRC12Files, self).__init__(imglist, name == 'train' if shuffle is None else shuffle)

    def _load(self, fname):
        return os.path.join(self.full_dir, fname)


class ILSVRC12(ILSVRC12Files):
    """Produces ``[image, label]`` for the images of ILSVRC12 (ImageNet's 1000 classes): the image
    is uint8 HxWx3 (BGR) as decoded from its file, the label an ``np.int32`` in 0..999, numbered
    as in caffe's ``synsets.txt`` (see :class:`ILSVRCMeta`).

    With ``dir_structure='original'``, ``dir`` is laid out as the official archives extract::

        dir/train/n01440764/n01440764_10026.JPEG ...
        dir/val/ILSVRC2012_val_00000001.JPEG ...
        dir/test/ILSVRC2012_test_00000001.JPEG ...

    With ``dir_structure='train'``, ``val`` (and ``test``) have one directory per synset like
    ``train``: ``dir/val/n01440764/ILSVRC2012_val_00000293.JPEG``.

    Args:
        dir (str): the directory holding the directory ``name``.
        name (str): 'train', 'val' or 'test'.
        meta_dir (str): the directory of caffe's meta files (see :class:`ILSVRCMeta`).
        shuffle (bool): shuffle the order in every epoch; None (the default) shuffles 'train' only.
        dir_structure (str): 'original' or 'train' (how 'val' and 'test' are laid out; 'train'
            always has one directory per synset). None guesses it from the directory.

    Example::

        df = ILSVRC12('/data/imagenet', 'val', meta_dir='/data/ilsvrc_metadata')
    """

    def _load(self, fname):
        return read_image(os.path.join(self.full_dir, fname), purpose='ILSVRC12')

    @staticmethod
    def get_training_bbox(bbox_dir, imglist):
        """The bounding box of each image of ``imglist``, from ImageNet's box annotations.

        Args:
            bbox_dir (str): the extracted ``ILSVRC2012_bbox_train_v2.tar.gz``
                (``bbox_dir/n01440764/n01440764_10026.xml`` ...).
            imglist (list): ``(relative image path, label)`` pairs, as
                :meth:`ILSVRCMeta.get_image_list` returns.

        Returns:
            list: for each image, a float32 array ``[xmin, ymin, xmax, ymax]`` (its first box), or
            None when it has no (readable) annotation.
        """
        boxes = [_read_first_box(os.path.join(bbox_dir, os.path.splitext(fname)[0] + '.xml'))
                 for fname, _ in imglist]
        logger.info("ILSVRC12: {} of {} images have a bounding box.".format(
            sum(b is not None for b in boxes), len(boxes)))
        return boxes


def _read_first_box(path):
    """``[xmin, ymin, xmax, ymax]`` of the first object of a PASCAL-VOC-style annotation file,
    or None when it is missing or unreadable."""
    try:
        box = ElementTree.parse(path).getroot().find('object').find('bndbox')
        return np.asarray([float(box.find(tag).text) for tag in ('xmin', 'ymin', 'xmax', 'ymax')],
                          dtype=np.float32)
    except (OSError, ElementTree.ParseError, AttributeError, TypeError, ValueError):
        return None


# ----- TinyImageNet -------------------------------------------------------------------------------

class TinyImageNet(ImageFileLabelData):
    """Produces ``[image, label]`` from TinyImageNet (200 classes, 500 training and 50 validation
    images each): the image is uint8 64x64x3 (BGR), the label an ``np.int32``, the line number (from
    0) of the class in ``wnids.txt``.

    ``dir`` is the extracted ``tiny-imagenet-200.zip``: ``dir/wnids.txt``,
    ``dir/train/<wnid>/images/*.JPEG``, ``dir/val/images/*.JPEG`` and
    ``dir/val/val_annotations.txt`` (one ``<file> <wnid> ...`` line per validation image).

    Args:
        dir (str): the dataset directory.
        name (str): 'train' or 'val'.
        shuffle (bool): shuffle the order in every epoch; None (the default) shuffles 'train' only.
    """

    WHERE_TO_GET = ("download tiny-imagenet-200.zip from http://cs231n.stanford.edu/tiny-imagenet-200.zip "
                    "and extract it; dir is the tiny-imagenet-200 directory")

    def __init__(self, dir, name, shuffle=None):
        _check_choice('TinyImageNet', 'name', name, ('train', 'val'))
        dir = os.path.expanduser(dir)
        self.full_dir = os.path.join(dir, name)
        self.name = name
        wnids = [line for _, line in _read_lines(
            find_dataset_file(dir, ['wnids.txt'], 'TinyImageNet', self.WHERE_TO_GET, argument=None))]
        if len(set(wnids)) != len(wnids):
            raise ValueError("TinyImageNet: '{}' lists a class twice.".format(os.path.join(dir, 'wnids.txt')))
        imglist = self._train_list(wnids) if name == 'train' else self._val_list(wnids)
        super(TinyImageNet, self).__init__(imglist, name == 'train' if shuffle is None else shuffle)

    def _train_list(self, wnids):
        imglist = []
        for label, wnid in enumerate(wnids):
            class_dir = os.path.join(self.full_dir, wnid, 'images')
            if not os.path.isdir(class_dir):
                raise _missing_directory('TinyImageNet', class_dir, "the training images of class " + wnid)
            imglist.extend((os.path.join(class_dir, f), label) for f in sorted(os.listdir(class_dir)))
        return imglist

    def _val_list(self, wnids):
        label_of = {wnid: label for label, wnid in enumerate(wnids)}
        path = find_dataset_file(self.full_dir, ['val_annotations.txt'], 'TinyImageNet', self.WHERE_TO_GET,
                                 argument=None)
        imglist = []
        for number, line in _read_lines(path):
            fields = line.split()
            if len(fields) < 2 or fields[1] not in label_of:
                raise ValueError("TinyImageNet: line {} of '{}' should be '<file> <wnid> ...' with a wnid "
                                 "of wnids.txt, got {!r}.".format(number, path, line))
            imglist.append((os.path.join(self.full_dir, 'images', fields[0]), label_of[fields[1]]))
        return imglist
