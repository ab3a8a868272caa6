"""Helpers of the DataFlow tests: the seed of their draws, an epoch read, worker processes looked at
(the fixture seeding with it: tests/dataflow/conftest.py); labelled batches of arrays."""

import psutil

from tensorpack_lite.dataflow import BatchData, DataFromList


SEED = 123
"""The seed of the draws the DataFlow tests check (the ``dataflow_seed`` fixture sets it)."""


def epoch(df):
    return list(df)


def reset(df):
    df.reset_state()
    return df


class Opaque(object):
    """An object no serializer knows: what the error of a datapoint holding one must name."""


def children():
    return {p.pid for p in psutil.Process().children() if p.status() != psutil.STATUS_ZOMBIE}


def gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def loaded(df):
    df.reset_state()
    return list(df)


def labelled_batches(images, labels, batch, shuffle=False, remainder=False):
    """A DataFlow of [images, labels] batches."""
    return BatchData(DataFromList([[x, y] for x, y in zip(images, labels)], shuffle=shuffle), batch,
                     remainder=remainder)
