"""multiprocess: the package gives the server module's names, and train gives create_server
(shared/API.md's public create_server())."""

import pytest

import tensorpack_lite.multiprocess as multiprocess
import tensorpack_lite.train as train
from tensorpack_lite.multiprocess import collective, server, stop_vote, sync_statistics

pytestmark = pytest.mark.quick


def test_the_package_exports_the_servers_names_and_its_modules():
    for name in server.__all__:
        assert name in multiprocess.__all__ and getattr(multiprocess, name) is getattr(server, name), name
    for module in (collective, server, stop_vote, sync_statistics):
        name = module.__name__.rsplit('.', 1)[-1]
        assert name in multiprocess.__all__ and getattr(multiprocess, name) is module


def test_train_exports_create_server():
    assert 'create_server' in train.__all__ and train.create_server is server.create_server
