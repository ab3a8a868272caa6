"""Packaging of tensorpack_lite.

TensorFlow itself is not a requirement: choose the flavour that fits the machine
(`tensorflow-cpu`, `tensorflow`, or `tensorflow[and-cuda]`) and install it beside.
"""

import os

from setuptools import find_packages, setup

here = os.path.dirname(os.path.abspath(__file__))
version = {}
with open(os.path.join(here, 'tensorpack_lite', 'libinfo.py')) as f:
    exec(f.read(), version)

with open(os.path.join(here, 'README.md'), encoding='utf-8') as f:
    long_description = f.read()

OPENCV = 'opencv-python-headless>=4.5'

setup(
    name='tensorpack_lite',
    version=version['__version__'],
    description="tensorpack's graph-mode training stack on TensorFlow 2.x (tf.compat.v1)",
    long_description=long_description,
    long_description_content_type='text/markdown',
    packages=find_packages(include=['tensorpack_lite', 'tensorpack_lite.*']),
    python_requires='>=3.10',
    install_requires=[
        'numpy>=1.23',
        'tabulate>=0.8',
        'termcolor>=1.1',
        'tqdm>4.29',
        'msgpack>=1.0',
        'pyzmq>=22',
        'psutil>=5',
    ],
    extras_require={
        # image augmentation and image DataFlows (imgaug, ImageFromFile, AugmentImage*, ILSVRC12...)
        'image': [OPENCV],
        # LMDBSerializer, LMDBData, LMDBDataDecoder, CaffeLMDB
        'lmdb': ['lmdb>=1.0'],
        # HDF5Serializer, HDF5Data
        'hdf5': ['h5py>=3.0'],
        'test': ['pytest>=7', 'pytest-timeout>=2.1', 'scikit-learn>=1.0', 'matplotlib>=3.5', 'scipy>=1.7',
                 OPENCV, 'lmdb>=1.0', 'h5py>=3.0'],
        'examples': ['scikit-learn>=1.0', 'matplotlib>=3.5', OPENCV, 'lmdb>=1.0'],
        'horovod': ['horovod==0.28.1'],
    },
    classifiers=[
        'Programming Language :: Python :: 3',
        'License :: OSI Approved :: Apache Software License',
        'Topic :: Scientific/Engineering :: Artificial Intelligence',
    ],
)
