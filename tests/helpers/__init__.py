"""What several test files share, each defined once, in a module per topic (fixtures are in
tests/conftest.py). Import a name from its module: ``from helpers.processes import run_bounded``
(conftest.py puts tests/ on sys.path). This file is the index; it defines nothing.

The suite's machinery (plugins tests/conftest.py loads):

- :mod:`helpers.process_guard`: a test leaves the process as it found it (signal handlers,
  environment, directory, sys.path, logger, default graph, threads, child processes, sockets).
- :mod:`helpers.run_order`: the random order of a run (pytest-randomly), its seed and the command
  that runs a worker's files again in that order.

Of any test:

- :mod:`helpers.paths`: ``TESTS_DIR``, ``REPO_DIR``.
- :mod:`helpers.package_modules`: the package's modules as files (``module_files``), what their
  imports name (``import_source``).
- :mod:`helpers.processes`: a child Python's environment (``subprocess_env``; a user's default
  one, ``users_env``), a child Python with or without TensorFlow (``run_python``), bounded
  launcher runs (``run_bounded``), ``kill_process_tree``.
- :mod:`helpers.timing`: time without timing thresholds (``HANG_TIMEOUT``, ``run_or_hang``,
  ``wait_until``, ``VirtualClock``).
- :mod:`helpers.logs`: what the library's logger logs (``capture_logs``, ``LogRecords``).
- :mod:`helpers.callbacks`: callbacks that read or break a run (``ReadBack``, ``RecordCost``,
  ``RaiseAt``) and ``AssignValues``, a session init without a checkpoint.
- :mod:`helpers.breaking_session`: a session that breaks as TensorFlow's do (``BreakingSession``,
  ``BreakSessionAt``).
- :mod:`helpers.models`: the shared models (``LineRegression``, ``LinearModel``, ``MLP``,
  ``DigitsMLPBase``, ``PointMean``, ``WhileLoopRNN``...) and the scripts' ``add_model_arguments``.
- :mod:`helpers.dataflows`: DataFlow helpers (``labelled_batches``, the DataFlow tests' ``SEED``...).
- :mod:`helpers.trainers`: small trainers for callback tests.
- :mod:`helpers.graphs`: graphs on virtual CPUs.
- :mod:`helpers.stats_records`: two runs' statistics compared (``assert_records_close``).
- :mod:`helpers.precision`: 16-bit numbers (``expected_precision_path``, ``assert_16_bit_sum``).
- :mod:`helpers.protobuf`: the protobuf wire format (``varint``).

What a few test files of a kind share (tests/README.md):

- :mod:`helpers.examples` (running the examples; the README's snippet and model),
  :mod:`helpers.guide_blocks` (the guides' code), :mod:`helpers.slurm_node` (a one-node Slurm),
  :mod:`helpers.distributed` (multi-worker jobs),
  :mod:`helpers.mpi` (MPI ranks), :mod:`helpers.multigpu` (multi-tower trainers),
  :mod:`helpers.scripted_stats`, :mod:`helpers.checkpoint_runs`, :mod:`helpers.contract`,
  :mod:`helpers.dataflow_cases`, :mod:`helpers.s3` (an S3 server),
  :mod:`helpers.shards` (numbered datapoints written as shards),
  :mod:`helpers.anomalies` (bad batches, for rolling back).

Free ports come from the library (``tensorpack_lite.cluster.config.held_free_port`` / ``free_ports``).
"""
