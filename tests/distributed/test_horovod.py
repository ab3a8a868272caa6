"""HorovodTrainer: 2 real processes on localhost through horovodrun (Gloo), in the second
environment built by .ci/horovod_env.sh (horovod 0.28.1 does not build against the newest
TensorFlow); the one-process reference runs here, in the main environment."""

import json
import os
import re
import sys
import time

import pytest

from helpers.processes import run_bounded
from helpers.mpi import (BATCH, EPOCHS, LR, SCRIPT, STEPS, assert_close, load_rank, horovod_rank_env,
                         reference_weights, train_tiny)
from helpers.shards import step_places, trained_ids, with_ids
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.dataflow.shards import save_shards
from tensorpack_lite.train.horovod_trainer import HorovodTrainer, RankShardData

RUN_TIMEOUT = 150


# ----- without horovod (main environment) ----------------------------------------------------

def test_without_horovod_the_error_says_how_to_install(monkeypatch):
    # (with mpi4py, HorovodTrainer uses the MPI engine instead: tests/distributed/test_mpi.py)
    for module in ('horovod', 'horovod.tensorflow', 'mpi4py', 'mpi4py.MPI'):
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ImportError) as info:
        HorovodTrainer()
    message = str(info.value)
    assert 'HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1' in message
    assert 'horovod==0.28.1' in message and '2.18.1' in message


def test_rank_shard_data_splits_evenly():
    df = DataFromList([[i] for i in range(11)], shuffle=False)
    shards = [RankShardData(df, rank, 3) for rank in range(3)]
    for shard in shards:
        shard.reset_state()
    taken = [[dp[0] for dp in shard] for shard in shards]
    assert taken == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]   # 9 and 10 form no complete group
    assert [len(s) for s in shards] == [3, 3, 3]
    with pytest.raises(ValueError, match='rank must be in'):
        RankShardData(df, 3, 3)
    with pytest.raises(ValueError, match='size must be at least 1'):
        RankShardData(df, 0, 0)
    with pytest.raises(TypeError, match='rank must be an integer'):
        RankShardData(df, 0.5, 2)


# How the ranks of a horovodrun job ended. horovodrun prints 'Process <r> exit with status code <n>.'
# for a rank whose status it saw was not 0 (nothing for 0), and once one has, ends the others (SIGTERM,
# then SIGKILL 5 s later) after 'Terminating remaining workers after failure of Process <r>.'. That
# ending can lose the status of a rank that has just exited by itself: horovod 0.28.1's terminating
# thread reaps it (psutil's wait), the launcher's own wait then finds no child and takes 0, and
# nothing is printed (seen once in 4 runs of the SIGTERM test). So a rank's own log (train_tiny.py)
# ends with the status it exits with (train_tiny.EXIT_MESSAGE), and each rank needs one or the other.

HOROVODRUN_STATUS = re.compile(r'Process (\d+) exit with status code (-?\d+)\.')
HOROVODRUN_ENDS_THE_OTHERS = re.compile(r'Terminating remaining workers after failure of Process (\d+)\.')
HOROVODRUN_KILL_STATUSES = (143, 137, -15, -9)
"""The statuses of a rank that horovodrun's ending (SIGTERM, then SIGKILL) killed: one that had
logged its exit status was killed in the interpreter's exit (seen once under load: 137)."""
RANK_EXIT = re.compile(re.escape(train_tiny.EXIT_MESSAGE).replace(r'\{rank\}', r'(\d+)').replace(
    r'\{status\}', r'(-?\d+)'))


def how_ranks_ended(output, logs):
    """``{rank: (status, how)}`` for each rank of ``logs`` (``logs[r]``: rank r's log), from
    horovodrun's ``output`` and the ranks' logs; ``status`` is None when neither tells it."""
    printed = {int(r): int(n) for r, n in HOROVODRUN_STATUS.findall(output)}
    failed_first = HOROVODRUN_ENDS_THE_OTHERS.findall(output)
    ended = {}
    for rank, log in enumerate(logs):
        said = [int(n) for r, n in RANK_EXIT.findall(log) if int(r) == rank]
        said = said[-1] if said else None
        seen = printed.get(rank)
        ended_by_horovodrun = bool(failed_first) and int(failed_first[0]) != rank
        if said is not None and ended_by_horovodrun and seen in HOROVODRUN_KILL_STATUSES:
            how = "logged that it exits with {}; horovodrun, ending it after Process {} failed, killed it " \
                  "in its exit (status {})".format(said, failed_first[0], seen)
            ended[rank] = (said, how)
        elif said is not None and seen not in (None, said):
            ended[rank] = (seen, "logged that it exits with {}, but horovodrun saw status {}".format(
                said, seen))
        elif said is not None:
            source = 'horovodrun printed it too' if seen is not None else 'its log; horovodrun printed none'
            ended[rank] = (said, "exited with {} ({})".format(said, source))
        elif seen is not None:
            by = (" (horovodrun ended it after Process {} failed)".format(failed_first[0])
                  if ended_by_horovodrun else "")
            ended[rank] = (seen, "ended with status {} before it logged its exit{}".format(seen, by))
        else:
            ended[rank] = (None, "unknown: horovodrun printed no status and its log says no exit")
    return ended


def assert_ranks_exited_with(status, output, logs):
    """Every rank of ``logs`` ended with ``status``, by horovodrun's output or its own log."""
    ended = how_ranks_ended(output, logs)
    told = '; '.join('rank {} {}'.format(rank, how) for rank, (_, how) in sorted(ended.items()))
    assert all(s == status for s, _ in ended.values()), "not every rank ended with {}: {}\n{}".format(
        status, told, output[-6000:])


def test_how_ranks_ended_needs_every_ranks_status():
    """The check of the SIGTERM tests below: each rank's status comes from horovodrun's line or
    from the rank's own log; a rank that neither accounts for fails it, as does one whose
    sources disagree or that exited with another status."""
    def line(rank, status):
        return 'Process {} exit with status code {}.\n'.format(rank, status)

    def log(rank, status=None):
        exit = '' if status is None else train_tiny.EXIT_MESSAGE.format(rank=rank, status=status) + '\n'
        return 'Training was preempted (SIGTERM)...\nRank {}: shutting Horovod down.\n{}'.format(rank, exit)

    both = line(1, 143) + line(0, 143)
    assert_ranks_exited_with(143, both, [log(0, 143), log(1, 143)])
    assert_ranks_exited_with(143, line(1, 143), [log(0, 143), log(1, 143)])   # a line lost: the log says
    terminated = line(1, 143) + 'Terminating remaining workers after failure of Process 1.\n' + line(0, 143)
    ended = how_ranks_ended(terminated, [log(0), log(1, 143)])
    assert ended[0] == (143, 'ended with status 143 before it logged its exit (horovodrun ended it after '
                             'Process 1 failed)')
    assert_ranks_exited_with(143, terminated, [log(0), log(1, 143)])
    killed_in_its_exit = (line(1, 143) + 'Terminating remaining workers after failure of Process 1.\n'
                          + line(0, 137))
    ended = how_ranks_ended(killed_in_its_exit, [log(0, 143), log(1, 143)])
    assert ended[0] == (143, 'logged that it exits with 143; horovodrun, ending it after Process 1 failed, '
                             'killed it in its exit (status 137)')
    assert_ranks_exited_with(143, killed_in_its_exit, [log(0, 143), log(1, 143)])
    failing = {
        'only one rank accounted for': (line(1, 143), [log(0), log(1, 143)], 'rank 0 unknown'),
        'a rank that exited 0': (line(1, 143), [log(0, 0), log(1, 143)], 'rank 0 exited with 0'),
        'a crash after the exit was logged': (
            line(1, 143) + line(0, 139), [log(0, 143), log(1, 143)],
            'rank 0 logged that it exits with 143, but horovodrun saw status 139'),
        'killed after the grace': (line(1, 143) + line(0, 137), [log(0), log(1, 143)],
                                   'rank 0 ended with status 137 before it logged its exit'),
        'killed after its logged exit, not by horovodrun': (
            line(1, 143) + line(0, 137), [log(0, 143), log(1, 143)],
            'rank 0 logged that it exits with 143, but horovodrun saw status 137'),
    }
    for case, (output, logs, says) in failing.items():
        with pytest.raises(AssertionError, match=re.escape(says)):
            assert_ranks_exited_with(143, output, logs)
        print(case, 'fails as it should')


# ----- two ranks (second environment) --------------------------------------------------------

def run_two_ranks(python, out_dir, *args):
    """``horovodrun -np 2`` on train_tiny.py; returns (exit code, output, seconds)."""
    horovodrun = os.path.join(os.path.dirname(python), 'horovodrun')
    command = [horovodrun, '-np', '2', '-H', 'localhost:2', '--gloo', python, SCRIPT,
               '--out', str(out_dir), '--batch', str(BATCH), '--steps-per-epoch', str(STEPS),
               '--epochs', str(EPOCHS), '--lr', str(LR)] + list(args)
    start = time.time()
    code, output = run_bounded(command, RUN_TIMEOUT, env=horovod_rank_env(), cwd=out_dir)
    return code, output, time.time() - start


def read_text(path):
    with open(str(path)) as f:
        return f.read()


def files_in(directory):
    return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


def test_two_ranks_average_like_one_process_and_only_rank0_writes(horovod_python, tmp_path):
    logdir = tmp_path / 'logs'
    code, output, _ = run_two_ranks(horovod_python, tmp_path, '--logdir', str(logdir), '--per-rank-logdir')
    assert code == 0, output[-6000:]
    rank0, rank1 = load_rank(tmp_path, 0), load_rank(tmp_path, 1)
    assert rank0['global_step'] == rank1['global_step'] == STEPS * EPOCHS
    # rank 1 started from other weights: equal results need the broadcast and the allreduce
    assert_close(rank0['weights'], rank1['weights'], rtol=0, atol=1e-6)
    assert_close(rank0['weights'], reference_weights(2, LR), rtol=1e-4, atol=1e-5)

    chief_dir, other_dir = str(logdir / 'rank0'), str(logdir / 'rank1')
    chief_files = files_in(chief_dir)
    assert 'checkpoint' in chief_files and 'model-{}.index'.format(STEPS * EPOCHS) in chief_files
    assert any(f.startswith('events.out.tfevents') for f in chief_files)
    stats = json.loads(read_text(os.path.join(chief_dir, 'stats.json')))
    assert [s['epoch_num'] for s in stats] == [1, 2] and all(s['rank'] == 0 for s in stats)
    other_files = files_in(other_dir)
    written = [f for f in other_files if f.startswith(('checkpoint', 'model-', 'stats', 'events', 'graph-'))]
    # only its own resume states (its data position) beside rank 0's checkpoints
    assert written == ['model-3.resume.rank-1', 'model-6.resume.rank-1'], other_files
    assert 'Start Epoch' not in read_text(os.path.join(other_dir, 'log.log'))   # stopped at training start


def test_two_ranks_train_from_shards_each_on_its_share_of_the_global_order(horovod_python, tmp_path):
    """``--data shards:DIR``: a ShardedData of local shards, made without a share, which the
    launch gives it from HorovodTrainer's rank and size. Each step's samples are the step's places
    of the global order, rank r taking places r, r + 2, ...; each epoch's samples once; the
    weights are one process's on the combined batches."""
    per_epoch = 2 * BATCH * STEPS
    samples = with_ids(train_tiny.make_samples(per_epoch))
    index = save_shards(DataFromList(samples, shuffle=False), str(tmp_path / 'shards'), shard_bytes=400)
    code, output, _ = run_two_ranks(horovod_python, tmp_path, '--data', 'shards:' + str(tmp_path / 'shards'))
    assert code == 0, output[-6000:]
    assert 'the share of process 1 of 2 (from the trainer)' in output
    steps = trained_ids([tmp_path / 'ids-rank{}.jsonl'.format(r) for r in range(2)])
    places = step_places(index, STEPS, 2 * BATCH)
    assert sorted(steps) == list(range(1, STEPS * EPOCHS + 1))
    trained = []
    for step in sorted(steps):
        assert steps[step] == {r: places(step)[r::2].tolist() for r in range(2)}, step
        trained += places(step).tolist()
    assert sorted(trained[:per_epoch]) == sorted(trained[per_epoch:]) == list(range(per_epoch))
    reference = train_tiny.train_single([samples[i][:2] for i in trained], 2 * BATCH, LR, STEPS * EPOCHS, 1)
    ranks = [load_rank(tmp_path, r) for r in range(2)]
    assert_close(ranks[0]['weights'], ranks[1]['weights'], rtol=0, atol=1e-6)
    assert_close(ranks[0]['weights'], reference, rtol=0, atol=1e-5)


def test_two_ranks_sum_in_a_shared_logdir(horovod_python, tmp_path):
    logdir = tmp_path / 'logs'
    code, output, _ = run_two_ranks(horovod_python, tmp_path, '--logdir', str(logdir), '--sum')
    assert code == 0, output[-6000:]
    rank0, rank1 = load_rank(tmp_path, 0), load_rank(tmp_path, 1)
    assert_close(rank0['weights'], rank1['weights'], rtol=0, atol=1e-6)
    # summing the two per-rank mean gradients is one process's mean gradient times 2
    assert_close(rank0['weights'], reference_weights(2, 2 * LR), rtol=1e-4, atol=1e-5)

    files = files_in(str(logdir))
    assert 'checkpoint' in files and 'stats.json' in files
    events = [f for f in files if f.startswith('events.out.tfevents')]
    assert events and all('.{}.'.format(rank0['pid']) in f for f in events), (events, rank0['pid'])
    stats = json.loads(read_text(logdir / 'stats.json'))
    assert [s['rank'] for s in stats] == [0, 0]
    # Both ranks opened log.log (the logger backs up a file it finds): only rank 0 logged training
    # there; rank 1 logged its end to the terminal only.
    logs = [read_text(logdir / f) for f in files if f.startswith('log.log')]
    assert [text for text in logs if 'Start Epoch' in text and 'Rank 0: shutting Horovod down' in text]
    assert 'Rank 1: shutting Horovod down' in output
    assert not [text for text in logs if 'Rank 1: shutting Horovod down' in text]


def test_rank0_stopping_ends_every_rank_with_fp16_gradients(horovod_python, tmp_path):
    code, output, seconds = run_two_ranks(horovod_python, tmp_path, '--fp16', '--stop-at-step', '2',
                                          '--epochs', '3')
    assert code == 0, output[-6000:]
    assert 'another rank ended its training' in output
    rank0, rank1 = load_rank(tmp_path, 0), load_rank(tmp_path, 1)
    assert rank0['global_step'] == 2
    assert_close(rank0['weights'], rank1['weights'], rtol=0, atol=1e-6)
    reference = reference_weights(2, LR, steps_per_epoch=2, max_epoch=1)
    assert_close(rank0['weights'], reference, rtol=1e-2, atol=1e-3)   # float16 gradients


def assert_both_ranks_stopped_after(tmp_path, output, step):
    """Both ranks of a SIGTERMed run exited with 143 after global step ``step`` with the same
    weights, and rank 0 wrote model-``step`` in tmp_path/logs."""
    assert_ranks_exited_with(143, output, [read_text(tmp_path / 'rank{}.log'.format(r)) for r in (0, 1)])
    assert os.path.isfile(os.path.join(str(tmp_path), 'logs', 'model-{}.index'.format(step)))
    rank0, rank1 = load_rank(tmp_path, 0), load_rank(tmp_path, 1)
    assert rank0['global_step'] == rank1['global_step'] == step
    assert_close(rank0['weights'], rank1['weights'], rtol=0, atol=0)


def test_sigterm_to_one_rank_stops_both_after_the_same_step(horovod_python, tmp_path):
    """Rank 1 gets SIGTERM after global step 4: its vote travels with step 5's gradients, both
    ranks stop after step 5 with the same weights, rank 0 writes model-5, both exit with 143."""
    code, output, _ = run_two_ranks(horovod_python, tmp_path, '--sigterm', '1', '4', '--epochs', '3',
                                    '--logdir', str(tmp_path / 'logs'))
    assert code != 0, output[-6000:]
    train_tiny.assert_stopped_together(tmp_path, 2, 1, 5)
    assert_both_ranks_stopped_after(tmp_path, output, 5)


def test_two_ranks_accumulating_4_micro_batches_train_like_one_process_on_the_combined_batch(
        horovod_python, tmp_path):
    """Issue 60 under Horovod: accumulate=4, 8 steps of 4 datapoints on each of 2 ranks, Adam: every
    4th step all-reduces the accumulated gradients (hvd.allreduce) and applies them, so the run is
    2 updates of one process on 32 datapoints each; the weights change at the updates only."""
    code, output, _ = run_two_ranks(horovod_python, tmp_path, '--accumulate', '4', '--optimizer', 'adam',
                                    '--steps-per-epoch', '8', '--epochs', '1', '--no-epoch-broadcast')
    assert code == 0, output[-6000:]
    rank0, rank1 = load_rank(tmp_path, 0), load_rank(tmp_path, 1)
    assert rank0['engine'] == 'Horovod' and rank0['global_step'] == rank1['global_step'] == 8
    hashes = rank0['step_hashes']
    assert hashes == rank1['step_hashes']
    assert [k for k in range(1, len(hashes)) if hashes[k] != hashes[k - 1]] == [3, 7]
    assert_close(rank0['weights'], rank1['weights'], rtol=0, atol=0)
    reference = train_tiny.accumulated_reference(2, 4, BATCH, 8, 1, LR, 'adam')
    assert_close(rank0['weights'], reference, rtol=0, atol=1e-6)


def test_sigterm_in_the_middle_of_an_update_stops_both_ranks_at_its_end(horovod_python, tmp_path):
    """accumulate=4: rank 1 gets SIGTERM after global step 5, one micro-batch into the 2nd update;
    its vote travels with the next all-reduce, the update of step 8: both ranks stop after step 8
    with the same weights, rank 0 writes model-8."""
    code, output, _ = run_two_ranks(horovod_python, tmp_path, '--sigterm', '1', '5', '--accumulate', '4',
                                    '--steps-per-epoch', '4', '--epochs', '4',
                                    '--logdir', str(tmp_path / 'logs'))
    assert code != 0, output[-6000:]
    train_tiny.assert_stopped_together(tmp_path, 2, 1, 8,
                                       until='the next step that reduces (the end of this update)')
    assert_both_ranks_stopped_after(tmp_path, output, 8)


def test_ranks_with_different_variables_fail_with_a_clear_error(horovod_python, tmp_path):
    code, output, _ = run_two_ranks(horovod_python, tmp_path, '--chief-only-variable')
    assert code != 0
    assert 'the ranks built different global variables' in output
    assert "rank 1 lacks ['only_on_chief']" in output


def test_two_ranks_of_two_towers_with_synchronized_batch_norm_train_like_one_process(
        horovod_python, tmp_path):
    """HorovodTrainer(gpus=['/cpu:0', '/cpu:1']) under Horovod: BatchNorm(sync_statistics='horovod')
    over the 4 towers and the weights of one process on the 4 batches; replicas and ranks equal."""
    code, output, _ = run_two_ranks(horovod_python, tmp_path, '--towers', '2', '--sync-batch-norm',
                                    '--no-epoch-broadcast')
    assert code == 0, output[-6000:]
    rank0, rank1 = load_rank(tmp_path, 0), load_rank(tmp_path, 1)
    assert rank0['engine'] == 'Horovod' and rank0['step_hashes'] == rank1['step_hashes']
    for name, value in rank0['weights'].items():
        assert value.tobytes() == rank1['weights'][name].tobytes(), name
    main = {n: v for n, v in rank0['weights'].items() if not n.startswith('tower1/')}
    for name in set(rank0['weights']) - set(main):
        assert rank0['weights'][name].tobytes() == main[name[len('tower1/'):]].tobytes(), name
    samples = train_tiny.make_samples(STEPS * BATCH * 4)
    reference = train_tiny.train_single(samples, 4 * BATCH, LR, STEPS, EPOCHS, batch_norm='')
    assert {'bn/mean/EMA', 'bn/variance/EMA'} <= set(main)
    assert_close(main, reference, rtol=1e-4, atol=1e-5)
