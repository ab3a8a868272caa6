"""Datasets as DataFlows: the digits scikit-learn ships, MNIST, Fashion-MNIST and CIFAR read from
files you provide (nothing is downloaded; see docs/datasets.md for where to get them).

Example::

    from tensorpack_lite.dataflow.dataset import Digits, Mnist

    df = Digits('train', image_size=28)              # real data, no files needed
    df = Mnist('train', dir='/data/mnist_data')      # or $TENSORPACK_DATASET/mnist_data
"""

from .cifar import Cifar10, Cifar100, CifarBase
from .common import get_dataset_path
from .digits import Digits
from .mnist import FashionMnist, Mnist

__all__ = ['Digits', 'Mnist', 'FashionMnist', 'CifarBase', 'Cifar10', 'Cifar100', 'get_dataset_path']
