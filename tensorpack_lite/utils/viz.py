"""Image visualisation helpers: patch grids, boxes, heat maps, dumps of a DataFlow's images and
an interactive viewer.

Only numpy is needed, except :func:`interactive_imshow` (OpenCV and a display),
:func:`dump_dataflow_images` (OpenCV to write or resize), :func:`intensity_to_rgb`
(matplotlib) and the text of :func:`draw_boxes`' labels (Pillow). Images are HxW or HxWxC
arrays in [0, 255]; color images are in the channel order you use (tensorpack's convention is
BGR), colors are given in the same order.
"""

import os
import sys

import numpy as np

from .argtools import log_once, shape2d
from .develop import import_optional
from .fs import mkdir_p

__all__ = ['stack_patches', 'gen_stack_patches', 'draw_boxes', 'interactive_imshow', 'intensity_to_rgb',
           'dump_dataflow_images']

DEFAULT_BOX_COLOR = (15, 128, 15)


def _to_uint8(img):
    img = np.asarray(img)
    if img.dtype == np.uint8:
        return img
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def _to_hwc(img, channels):
    """An HxW or HxWxC image as HxWx``channels`` (a single channel is repeated)."""
    img = np.asarray(img)
    if img.ndim == 2:
        img = img[:, :, None]
    if img.ndim != 3 or img.shape[2] not in (1, 3):
        raise ValueError("Expected an HxW, HxWx1 or HxWx3 image, got shape {}".format(img.shape))
    if img.shape[2] != channels:
        img = np.repeat(img, channels, axis=2)
    return img


def _color_channels(bgcolor):
    """1 for a gray level (int), 3 for a 3-tuple; ValueError otherwise."""
    if np.ndim(bgcolor) == 0:
        return 1
    if len(bgcolor) == 3:
        return 3
    raise ValueError("bgcolor must be an int or a 3-tuple, got {!r}".format(bgcolor))


def _patch_array(patch_list):
    """The patches as an (N, H, W, C) array, C in (1, 3)."""
    try:
        patches = np.asarray(patch_list)
    except ValueError:   # a list of images of different shapes
        patches = None
    if patches is not None and patches.ndim == 3:
        patches = patches[:, :, :, None]
    if patches is None or patches.ndim != 4 or patches.shape[3] not in (1, 3) or len(patches) == 0:
        raise ValueError("patch_list must be a non-empty NHW or NHWC (C = 1 or 3) array or list of images "
                         "of one shape, got {}; pass pad=True to stack images of different sizes.".format(
                             'shape {}'.format(patches.shape) if patches is not None else
                             'shapes {}'.format(sorted({np.shape(p) for p in patch_list}))))
    return patches


def _pad_patches(patch_list, bgcolor):
    """Images of different sizes, each centered on a ``bgcolor`` patch of the largest size."""
    channels = max([_color_channels(bgcolor)] + [3 if np.ndim(p) == 3 and np.shape(p)[2] == 3 else 1
                                                 for p in patch_list])
    patches = [_to_hwc(_to_uint8(p), channels) for p in patch_list]
    ph = max(p.shape[0] for p in patches)
    pw = max(p.shape[1] for p in patches)
    out = np.empty((len(patches), ph, pw, channels), dtype=np.uint8)
    out[...] = bgcolor
    for k, p in enumerate(patches):
        top, left = (ph - p.shape[0]) // 2, (pw - p.shape[1]) // 2
        out[k, top:top + p.shape[0], left:left + p.shape[1]] = p
    return out


class _Grid(object):
    """The geometry of a grid of ``nr_row`` x ``nr_col`` patches of size ``ph`` x ``pw``
    separated by ``border`` pixels of ``bgcolor``."""

    def __init__(self, ph, pw, nr_row, nr_col, channels, border, bgcolor):
        if nr_row <= 0 or nr_col <= 0:
            raise ValueError("The grid must have at least one row and one column, got nr_row={}, "
                             "nr_col={}".format(nr_row, nr_col))
        self.ph, self.pw = ph, pw
        self.nr_row, self.nr_col = nr_row, nr_col
        self.border = int(0.1 * min(ph, pw)) if border is None else int(border)
        self.bgcolor = bgcolor
        self.channels = max(channels, _color_channels(bgcolor))

    @property
    def capacity(self):
        return self.nr_row * self.nr_col

    def draw(self, patches):
        """The grid image (uint8 HxWxC) of at most :attr:`capacity` patches, row by row;
        places left empty are background."""
        assert len(patches) <= self.capacity
        canvas = np.empty((self.nr_row * (self.ph + self.border) - self.border,
                           self.nr_col * (self.pw + self.border) - self.border,
                           self.channels), dtype=np.uint8)
        canvas[...] = self.bgcolor
        for k, patch in enumerate(patches):
            top = (k // self.nr_col) * (self.ph + self.border)
            left = (k % self.nr_col) * (self.pw + self.border)
            canvas[top:top + self.ph, left:left + self.pw] = _to_hwc(_to_uint8(patch), self.channels)
        return canvas

    def index_at(self, x, y):
        """The grid position of pixel (x, y), or None on a border."""
        row, dy = divmod(int(y), self.ph + self.border)
        col, dx = divmod(int(x), self.pw + self.border)
        if dy >= self.ph or dx >= self.pw or row >= self.nr_row or col >= self.nr_col:
            return None
        return row * self.nr_col + col


def _show(image, grid, patches, first_index, lclick_cb):
    """Show a grid image; a left click on a patch calls ``lclick_cb(patch, index)``."""
    def on_click(img, x, y):
        pos = grid.index_at(x, y)
        if pos is not None and pos < len(patches):
            lclick_cb(patches[pos], first_index + pos)
    interactive_imshow(image, lclick_cb=None if lclick_cb is None else on_click)


def stack_patches(patch_list, nr_row, nr_col, border=None, pad=False, bgcolor=255,
                  viz=False, lclick_cb=None):
    """Stack images into a grid, row by row (e.g. a sheet of GAN samples).

    Args:
        patch_list (list[np.ndarray] or np.ndarray): NHW or NHWC images in [0, 255];
            ``len(patch_list)`` must be ``nr_row * nr_col``.
        nr_row, nr_col (int): rows and columns of the grid.
        border (int): pixels between patches; defaults to ``int(0.1 * min(h, w))``.
        pad (bool): allow patches of different sizes (and channels): each is centered on a
            background patch of the largest height and width.
        bgcolor (int or 3-tuple): background color in [0, 255].
        viz (bool): show the result with :func:`interactive_imshow`.
        lclick_cb: ``f(patch, index in patch_list)``, called when a patch is left-clicked in
            the viewer; implies ``viz=True``.

    Returns:
        np.ndarray: the grid, uint8 of shape ``(nr_row * (h + border) - border,
        nr_col * (w + border) - border, C)``, C being 3 if the patches or ``bgcolor`` have
        color, else 1.

    Example::

        grid = stack_patches(images[:64], 8, 8, border=2)     # images: (N, 28, 28) in [0, 255]
    """
    patches = _patch_array(_pad_patches(patch_list, bgcolor) if pad else patch_list)
    if len(patches) != nr_row * nr_col:
        raise ValueError("stack_patches(): got {} patches for a grid of {} x {} = {} places.".format(
            len(patches), nr_row, nr_col, nr_row * nr_col))
    grid = _Grid(patches.shape[1], patches.shape[2], nr_row, nr_col, patches.shape[3], border, bgcolor)
    image = grid.draw(patches)
    if viz or lclick_cb is not None:
        _show(image, grid, patches, 0, lclick_cb)
    return image


def gen_stack_patches(patch_list, nr_row=None, nr_col=None, border=None, max_width=1000, max_height=1000,
                      bgcolor=255, viz=False, lclick_cb=None):
    """Like :func:`stack_patches` for a long list: yields one grid after another, each of
    ``nr_row`` x ``nr_col`` patches (the last one filled up with background).

    Args:
        nr_row, nr_col (int): the grid's size; when None, as many as fit in ``max_height``,
            ``max_width`` pixels.
        max_width, max_height (int): the largest grid image, used only when ``nr_row`` or
            ``nr_col`` is None.
        patch_list, border, bgcolor, viz, lclick_cb: as in :func:`stack_patches` (the index
            given to ``lclick_cb`` is the one in the whole ``patch_list``).

    Yields:
        np.ndarray: the grid images.

    Example::

        for k, grid in enumerate(gen_stack_patches(images, 10, 10)):   # 1000 images: 10 grids
            save(grid, 'grid{}.png'.format(k))
    """
    patches = _patch_array(patch_list)
    ph, pw = patches.shape[1:3]
    border = int(0.1 * min(ph, pw)) if border is None else int(border)
    if nr_row is None:
        nr_row = max(1, (max_height + border) // (ph + border))
    if nr_col is None:
        nr_col = max(1, (max_width + border) // (pw + border))
    grid = _Grid(ph, pw, nr_row, nr_col, patches.shape[3], border, bgcolor)
    for start in range(0, len(patches), grid.capacity):
        page = patches[start:start + grid.capacity]
        image = grid.draw(page)
        if viz or lclick_cb is not None:
            _show(image, grid, page, start, lclick_cb)
        yield image


def _check_boxes(im, boxes, labels):
    boxes = np.asarray(boxes)
    if boxes.size == 0:
        boxes = boxes.reshape(0, 4)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ValueError("draw_boxes(): boxes must be an Nx4 array of [x1, y1, x2, y2], got shape {}"
                         .format(boxes.shape))
    boxes = boxes.astype(np.int64)
    if labels is not None and len(labels) != len(boxes):
        raise ValueError("draw_boxes(): {} labels for {} boxes.".format(len(labels), len(boxes)))
    height, width = im.shape[:2]
    for k, (x1, y1, x2, y2) in enumerate(boxes):
        if not (0 <= x1 <= x2 <= width and 0 <= y1 <= y2 <= height):
            raise ValueError("draw_boxes(): box {} = [{}, {}, {}, {}] is empty or outside the image of "
                             "shape {}.".format(k, x1, y1, x2, y2, im.shape))
    return boxes


def _draw_label(im, x, y, text, color):
    """Write ``text`` in light gray on a ``color`` band whose bottom-left corner is (x, y), moved
    inside the image when needed. Needs Pillow; without it, logs a warning and does nothing."""
    if not text:
        return im
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        log_once("draw_boxes(): the text of labels needs Pillow (pip install pillow); "
                 "only the boxes are drawn.", 'warn')
        return im
    pil = Image.fromarray(im)
    draw = ImageDraw.Draw(pil)
    left, top, right, bottom = draw.textbbox((0, 0), text)
    text_w, text_h = right, bottom + 2
    x = max(0, min(int(x), im.shape[1] - text_w))
    y = max(text_h, int(y))
    draw.rectangle([x, y - text_h, x + text_w - 1, y - 1], fill=tuple(int(c) for c in color))
    draw.text((x, y - text_h), text, fill=(222, 222, 222))
    return np.asarray(pil).copy()


def draw_boxes(im, boxes, labels=None, color=None):
    """Draw rectangles (1 pixel wide), larger ones first, and optionally a label on each.

    Args:
        im (np.ndarray): an HxW or HxWx3 image in [0, 255]. It is not modified.
        boxes (np.ndarray): Nx4, each row ``[x1, y1, x2, y2]`` in pixels (inclusive corners,
            within the image).
        labels (list[str] or None): one text per box, written above its top-left corner
            (needs Pillow).
        color (3-tuple): the color, in the image's channel order; default ``(15, 128, 15)``.

    Returns:
        np.ndarray: a new uint8 HxWx3 image (a gray image is made color).

    Example::

        out = draw_boxes(img, np.array([[10, 30, 200, 100]]), ['cat'])
    """
    im = _to_hwc(_to_uint8(im), 3).copy()
    boxes = _check_boxes(im, boxes, labels)
    color = np.asarray(DEFAULT_BOX_COLOR if color is None else color, dtype=np.uint8)
    height, width = im.shape[:2]
    areas = (boxes[:, 2] - boxes[:, 0] + 1) * (boxes[:, 3] - boxes[:, 1] + 1)
    for k in np.argsort(-areas, kind='stable'):
        x1, y1 = boxes[k, :2]
        x2, y2 = min(boxes[k, 2], width - 1), min(boxes[k, 3], height - 1)
        im[y1, x1:x2 + 1] = color
        im[y2, x1:x2 + 1] = color
        im[y1:y2 + 1, x1] = color
        im[y1:y2 + 1, x2] = color
        if labels is not None:
            im = _draw_label(im, x1, y1, str(labels[k]), color)
    return im


def _has_display():
    if sys.platform.startswith('linux'):
        return bool(os.environ.get('DISPLAY') or os.environ.get('WAYLAND_DISPLAY'))
    return True


def interactive_imshow(img, lclick_cb=None, rclick_cb=None, **kwargs):
    """Show ``img`` (BGR) in an OpenCV window and wait for a key.

    Keys: ``q`` closes the window, ``x`` exits the program (``sys.exit()``), ``s`` saves the
    image to ``out.png``; ``key_cb_<k>=f`` in ``kwargs`` makes key ``<k>`` call ``f(img)``
    instead.

    Args:
        img (np.ndarray): the image.
        lclick_cb, rclick_cb: ``f(img, x, y)``, called on a left / right click.

    Raises:
        RuntimeError: when there is no display (e.g. ``$DISPLAY`` is not set on Linux).
        ImportError: when OpenCV is missing (``pip install 'tensorpack_lite[image]'``).
    """
    if not _has_display():
        raise RuntimeError("interactive_imshow() needs a display, but neither $DISPLAY nor "
                           "$WAYLAND_DISPLAY is set; save the image to a file instead.")
    cv2 = import_optional('cv2', extra='image', purpose='interactive_imshow()')
    window = 'tensorpack_lite'
    cv2.imshow(window, img)

    def on_mouse(event, x, y, *args):
        if event == cv2.EVENT_LBUTTONUP and lclick_cb is not None:
            lclick_cb(img, x, y)
        elif event == cv2.EVENT_RBUTTONUP and rclick_cb is not None:
            rclick_cb(img, x, y)

    cv2.setMouseCallback(window, on_mouse)
    key = chr(cv2.waitKey(-1) & 0xff)
    custom = kwargs.get('key_cb_' + key)
    if custom is not None:
        custom(img)
    elif key == 'q':
        cv2.destroyWindow(window)
    elif key == 'x':
        sys.exit()
    elif key == 's':
        cv2.imwrite('out.png', img)


def intensity_to_rgb(intensity, cmap='cubehelix', normalize=False):
    """Color a 2-D map of intensities (e.g. a saliency map) with a matplotlib colormap.

    Args:
        intensity (np.ndarray): an HxW array, values in [0, 1] (values outside are clipped by
            the colormap).
        cmap (str): the name of a matplotlib colormap.
        normalize (bool): first rescale the values linearly to [0, 1] (a constant map becomes 0).

    Returns:
        np.ndarray: an HxWx3 float32 RGB image in [0, 255].

    Example::

        heat = intensity_to_rgb(saliency, cmap='jet', normalize=True)
    """
    intensity = np.asarray(intensity)
    if intensity.ndim != 2:
        raise ValueError("intensity_to_rgb(): intensity must be a 2-D (HxW) array, got shape {}.".format(
            intensity.shape))
    values = intensity.astype(np.float64)
    if normalize:
        values = values - values.min()
        top = values.max()
        if top > 0:
            values = values / top
    matplotlib = import_optional('matplotlib', purpose='intensity_to_rgb()')
    try:
        colormap = matplotlib.colormaps[cmap]
    except KeyError:
        raise ValueError("intensity_to_rgb(): unknown matplotlib colormap {!r}.".format(cmap))
    return (colormap(values)[..., :3] * 255.0).astype(np.float32)


def _dataflow_images(df, index, batched):
    """The images of component ``index`` of ``df``'s datapoints, epoch after epoch."""
    df.reset_state()
    while True:
        found = False
        for dp in df:
            for img in (dp[index] if batched else [dp[index]]):
                found = True
                yield img
        if not found:
            raise ValueError("dump_dataflow_images(): the DataFlow {!r} produced no image in a whole "
                             "epoch.".format(df))


def dump_dataflow_images(df, index=0, batched=True, number=1000, output_dir=None, scale=1, resize=None,
                         viz=None, flipRGB=False):
    """Write (and/or show) the images a DataFlow produces, to look at what a model is fed.

    Images are taken from component ``index`` of the datapoints (over several epochs if
    needed) until ``number`` have been handled. Each is multiplied by ``scale``, resized,
    channel-flipped if asked, then written as ``output_dir/001.jpg``, ``002.jpg``... (values
    clipped to [0, 255]) and/or gathered into grids shown with :func:`stack_patches`.

    Args:
        df (DataFlow): the DataFlow (its ``reset_state()`` is called).
        index (int): which component holds the images.
        batched (bool): the component is a batch of images (NHW or NHWC) rather than one
            image (HW or HWC).
        number (int): how many images to handle.
        output_dir (str): where to write the images (created when missing); None writes nothing.
        scale (float): multiply the values first (e.g. 255 for images in [0, 1]).
        resize (int or (h, w)): the size to resize each image to.
        viz ((rows, cols)): show the images in grids of this size (needs a display).
        flipRGB (bool): reverse the channel order (RGB <-> BGR; OpenCV writes BGR).

    Example::

        dump_dataflow_images(BatchData(ds, 32), index=0, number=100, output_dir='dump', scale=255)
    """
    cv2 = None
    if output_dir is not None or resize is not None:
        cv2 = import_optional('cv2', extra='image', purpose='dump_dataflow_images()')
    if output_dir is not None:
        mkdir_p(output_dir)
    grid_shape = shape2d(viz) if viz is not None else None
    size = shape2d(resize) if resize is not None else None
    shown = []
    images = _dataflow_images(df, index, batched)
    for count in range(1, number + 1):
        img = np.asarray(next(images))
        if scale != 1:
            img = img * scale
        if size is not None:
            img = cv2.resize(img, (size[1], size[0]))     # OpenCV takes (width, height)
        if flipRGB:
            img = img[:, :, ::-1]
        if output_dir is not None:
            cv2.imwrite(os.path.join(output_dir, '{:03d}.jpg'.format(count)), _to_uint8(img))
        if grid_shape is not None:
            shown.append(img)
            if len(shown) == grid_shape[0] * grid_shape[1]:
                stack_patches(shown, grid_shape[0], grid_shape[1], viz=True)
                shown = []
