"""Datasets as DataFlows: the digits scikit-learn ships, and MNIST, Fashion-MNIST, CIFAR, SVHN,
Caltech 101 Silhouettes, BSDS500, ILSVRC12 (ImageNet), TinyImageNet and Places365 read from
files you provide (nothing is downloaded; see docs/datasets.md for where to get them).

Example::

    from tensorpack_lite.dataflow.dataset import Digits, Mnist

    df = Digits('train', image_size=28)              # real data, no files needed
    df = Mnist('train', dir='/data/mnist_data')      # or $TENSORPACK_DATASET/mnist_data
"""

from .bsds500 import BSDS500
from .caltech101 import Caltech101Silhouettes
from .cifar import Cifar10, Cifar100, CifarBase
from .common import get_dataset_path
from .digits import Digits
from .ilsvrc import ILSVRC12, ILSVRC12Files, ILSVRCMeta, TinyImageNet
from .mnist import FashionMnist, Mnist
from .places import Places365Standard
from .svhn import SVHNDigit

__all__ = ['Digits', 'Mnist', 'FashionMnist', 'CifarBase', 'Cifar10', 'Cifar100', 'SVHNDigit',
           'Caltech101Silhouettes', 'BSDS500', 'ILSVRCMeta', 'ILSVRC12Files', 'ILSVRC12', 'TinyImageNet',
           'Places365Standard', 'get_dataset_path']
