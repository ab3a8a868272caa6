#!/usr/bin/env bash
# Build (or reuse) the second Python environment that runs tensorpack_lite's Horovod tests:
# a venv with tensorflow-cpu 2.18.1 (the newest TensorFlow horovod 0.28.1 builds against),
# horovod 0.28.1 built with Gloo (no MPI) and this checkout installed in editable mode.
#
#   bash .ci/horovod_env.sh            # build or reuse; last line: HOROVOD_PYTHON=<python>
#
# Location: $TENSORPACK_LITE_HOROVOD_ENV (default ~/.cache/tensorpack_lite/horovod-tf2.18.1).
# Base interpreter: $TENSORPACK_LITE_HOROVOD_BASE_PYTHON, else the first Python 3.10-3.12 on PATH.
# A marker file records the versions; a later run with the same versions reuses the env in
# seconds (re-pointing the editable install if this checkout moved). The first build compiles
# horovod (about 8 minutes on 2 cores); pip's wheel cache makes later builds on the machine fast.
set -euo pipefail

TF_VERSION=2.18.1
HOROVOD_VERSION=0.28.1
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ENV_DIR="${TENSORPACK_LITE_HOROVOD_ENV:-$HOME/.cache/tensorpack_lite/horovod-tf${TF_VERSION}}"
MARKER="$ENV_DIR/.tensorpack_lite_horovod_env"
LOG="$ENV_DIR.build.log"

say() { echo "[horovod_env] $*"; }
die() { echo "[horovod_env] ERROR: $*" >&2; exit 1; }

# Run a command with its output in $LOG; on failure show the end of the log and stop.
run_logged() {
    say "+ $*"
    if ! "$@" >>"$LOG" 2>&1; then
        echo "----- last lines of $LOG -----" >&2
        tail -n 40 "$LOG" >&2
        die "command failed: $* (full log: $LOG)"
    fi
}

pick_base_python() {
    local cand
    for cand in "${TENSORPACK_LITE_HOROVOD_BASE_PYTHON:-}" python python3 python3.12 python3.11 python3.10; do
        [ -n "$cand" ] || continue
        command -v "$cand" >/dev/null 2>&1 || continue
        if "$cand" -c 'import sys, venv; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 12))' \
                >/dev/null 2>&1; then
            command -v "$cand"
            return 0
        fi
    done
    return 1
}

env_is_complete() {
    [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$WANTED" ] && [ -x "$ENV_DIR/bin/horovodrun" ] &&
        env_python -c 'import tensorflow, horovod.tensorflow' >/dev/null 2>&1
}

# The env's Python, run from / without PYTHONPATH: sees only what is installed in the env.
env_python() {
    (cd / && env -u PYTHONPATH "$ENV_DIR/bin/python" "$@")
}

# Install the editable checkout unless the env already imports tensorpack_lite from $REPO.
ensure_checkout_installed() {
    local where
    where="$(env_python -c 'import importlib.util as u, os
spec = u.find_spec("tensorpack_lite")
print(os.path.dirname(os.path.dirname(spec.origin)) if spec else "")' 2>/dev/null || true)"
    if [ "$where" = "$REPO" ]; then
        say "tensorpack_lite already installed from $REPO"
    else
        say "installing this checkout ($REPO) in editable mode"
        # Named with the checkout so that pip keeps TensorFlow (and numpy) at versions it supports.
        run_logged "$ENV_DIR/bin/python" -m pip install -e "$REPO[test]" "tensorflow-cpu==$TF_VERSION"
    fi
}

ensure_build_tools() {
    local missing=()
    command -v g++ >/dev/null 2>&1 || missing+=(g++)
    command -v make >/dev/null 2>&1 || missing+=(make)
    command -v cmake >/dev/null 2>&1 || missing+=(cmake)
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null 2>&1 || die "missing build tools (${missing[*]}) and no apt-get to install them"
    local sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    say "installing missing build tools with apt-get: ${missing[*]}"
    run_logged "${sudo[@]}" apt-get update
    run_logged "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

build_env() {
    local base
    base="$(pick_base_python)" || die "no Python 3.10-3.12 with the venv module found; tensorflow-cpu $TF_VERSION
needs one (set TENSORPACK_LITE_HOROVOD_BASE_PYTHON to its path)"
    if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" != "$WANTED" ]; then
        say "marker differs (found: $(tr '\n' ' ' <"$MARKER")); rebuilding $ENV_DIR"
        rm -rf "$ENV_DIR"
    fi
    rm -f "$MARKER"
    ensure_build_tools
    if [ ! -x "$ENV_DIR/bin/python" ]; then
        say "creating venv $ENV_DIR with $base ($("$base" --version 2>&1))"
        run_logged "$base" -m venv "$ENV_DIR"
    fi
    local py="$ENV_DIR/bin/python"
    run_logged "$py" -m pip install -U pip setuptools wheel packaging
    say "installing tensorflow-cpu==$TF_VERSION"
    run_logged "$py" -m pip install "tensorflow-cpu==$TF_VERSION"
    say "building horovod==$HOROVOD_VERSION with Gloo and TensorFlow (slow the first time on a machine)"
    local start=$SECONDS
    # horovod's build imports tensorflow, so it builds inside this env (no build isolation);
    # pip keeps the built wheel in its cache for the next build on this machine.
    local build_env=(env HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1
                     HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=gloo)
    run_logged "${build_env[@]}" "$py" -m pip install --no-build-isolation "horovod==$HOROVOD_VERSION"
    if ! env_python -c 'import horovod.tensorflow' >>"$LOG" 2>&1; then
        # e.g. a horovod left from a build against another TensorFlow: build it afresh
        say "horovod.tensorflow does not import; rebuilding horovod without pip's cache"
        run_logged "${build_env[@]}" "$py" -m pip install --no-build-isolation --force-reinstall \
            --no-deps --no-cache-dir "horovod==$HOROVOD_VERSION"
    fi
    say "horovod installed in $((SECONDS - start)) s"
    ensure_checkout_installed
    say "checking the build"
    run_logged "$ENV_DIR/bin/horovodrun" --check-build
    env_python -c 'import horovod.tensorflow as hvd, sys; sys.exit(not hvd.gloo_built())' ||
        die "horovod was built without Gloo (see $LOG)"
    echo "$WANTED" >"$MARKER"
}

main() {
    mkdir -p "$(dirname "$ENV_DIR")"
    WANTED="tensorflow-cpu==$TF_VERSION horovod==$HOROVOD_VERSION"
    # One build at a time on this machine (CI and the test fixture may both call this script).
    exec 9>"$ENV_DIR.lock"
    if command -v flock >/dev/null 2>&1; then
        flock -w 3600 9 || die "timed out waiting for another build of $ENV_DIR (lock $ENV_DIR.lock)"
    fi
    : >"$LOG"
    if env_is_complete; then
        say "reusing $ENV_DIR ($WANTED)"
        ensure_checkout_installed
    else
        say "building $ENV_DIR ($WANTED); log: $LOG"
        local start=$SECONDS
        build_env
        say "built $ENV_DIR in $((SECONDS - start)) s"
    fi
    echo "HOROVOD_PYTHON=$ENV_DIR/bin/python"
}

main "$@"
