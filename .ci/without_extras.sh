#!/usr/bin/env bash
# Run a command as on a machine without the Debian extras that .ci/run installs for some tests
# (Graphviz's dot, chromium, chromedriver): every PATH directory holding one of them is replaced
# by a temporary directory of links to everything else in it.
#
#   bash .ci/without_extras.sh COMMAND [ARG...]
set -euo pipefail
HIDDEN=(dot chromium chromium-browser chromedriver)
MASKED="$(mktemp -d "${TMPDIR:-/tmp}/without_extras.XXXXXX")"
trap 'rm -rf "$MASKED"' EXIT
NEW_PATH=""
IFS=':' read -r -a DIRS <<< "$PATH"
for i in "${!DIRS[@]}"; do
    dir="${DIRS[$i]}"
    for name in "${HIDDEN[@]}"; do
        if [ -e "$dir/$name" ]; then
            mkdir "$MASKED/$i"
            ln -s "$dir"/* "$MASKED/$i/"
            for hidden in "${HIDDEN[@]}"; do rm -f "$MASKED/$i/$hidden"; done
            dir="$MASKED/$i"
            break
        fi
    done
    NEW_PATH="${NEW_PATH:+$NEW_PATH:}$dir"
done
for name in "${HIDDEN[@]}"; do
    if PATH="$NEW_PATH" command -v "$name" >/dev/null 2>&1; then
        echo "$0: $name is still on the PATH" >&2
        exit 1
    fi
done
PATH="$NEW_PATH" "$@"
