#!/usr/bin/env bash
# Print one of the README's two quick-start commands, as written there:
#
#   bash .ci/readme_command.sh example   # installs and runs the main example
#   bash .ci/readme_command.sh test      # installs and runs the whole test suite (what CI runs)
#
# Each is the line after its comment ("# install, then train ..." / "# install, then run the
# whole test suite") in the README's Quick start.
set -euo pipefail
README="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/README.md"
case "${1:-}" in
    example) marker='^# install, then train the main example' ;;
    test) marker='^# install, then run the whole test suite' ;;
    *) echo "usage: $0 example|test" >&2; exit 2 ;;
esac
command="$(awk -v marker="$marker" '$0 ~ marker { if ((getline line) > 0) print line; exit }' "$README")"
[ -n "$command" ] || { echo "$0: no line after /$marker/ in $README" >&2; exit 1; }
echo "$command"
