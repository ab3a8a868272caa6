"""Building ``tf.compat.v1.Summary`` protos and summary ops."""

import io

import numpy as np

from ..compat import tfv1

__all__ = ['create_scalar_summary', 'create_image_summary']


def create_scalar_summary(name, value):
    """A ``Summary`` proto holding one scalar.

    Example::

        summary = create_scalar_summary('val-error', 0.03)
    """
    summary = tfv1.Summary()
    summary.value.add(tag=name, simple_value=float(value))
    return summary


def _encode_png(image):
    """PNG bytes of an HxWxC uint8 image, encoded without TensorFlow ops or extra packages."""
    import struct
    import zlib
    height, width, channels = image.shape
    color_type = {1: 0, 3: 2, 4: 6}[channels]
    raw = b''.join(b'\x00' + image[row].tobytes() for row in range(height))

    def chunk(kind, data):
        body = kind + data
        return struct.pack('>I', len(data)) + body + struct.pack('>I', zlib.crc32(body) & 0xffffffff)

    header = struct.pack('>IIBBBBB', width, height, 8, color_type, 0, 0, 0)
    out = io.BytesIO()
    out.write(b'\x89PNG\r\n\x1a\n')
    out.write(chunk(b'IHDR', header))
    out.write(chunk(b'IDAT', zlib.compress(raw, 6)))
    out.write(chunk(b'IEND', b''))
    return out.getvalue()


def create_image_summary(name, images):
    """A ``Summary`` proto of images.

    Args:
        name (str): the tag; with several images they are tagged ``name/0``, ``name/1``...
        images (np.ndarray): NHWC, HWC or HW, values in [0, 255] (clipped), with 1, 3 or 4
            channels.
    """
    images = np.asarray(images)
    if images.ndim == 2:
        images = images[np.newaxis, :, :, np.newaxis]
    elif images.ndim == 3:
        images = images[np.newaxis]
    if images.ndim != 4 or images.shape[3] not in (1, 3, 4):
        raise ValueError("create_image_summary('{}'): expected NHWC images with 1, 3 or 4 channels, "
                         "got shape {}".format(name, images.shape))
    if images.dtype != np.uint8:
        images = np.clip(images, 0, 255).astype(np.uint8)
    summary = tfv1.Summary()
    for index, image in enumerate(images):
        proto = tfv1.Summary.Image(height=image.shape[0], width=image.shape[1],
                                   colorspace=image.shape[2], encoded_image_string=_encode_png(image))
        tag = name if len(images) == 1 else '{}/{}'.format(name, index)
        summary.value.add(tag=tag, image=proto)
    return summary
