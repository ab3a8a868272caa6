#!/usr/bin/env bash
# Print one of the README's commands, as written there:
#
#   bash .ci/readme_command.sh example   # installs and runs the main example (quick start)
#   bash .ci/readme_command.sh test      # installs and runs the whole test suite (quick start; what CI runs)
#   bash .ci/readme_command.sh quick     # installs and runs the quick tier (-m quick; CI runs it first)
#   bash .ci/readme_command.sh docs      # installs and builds the documentation site (section Docs)
#
# Each is the line after its comment ("# install, then train ..." / "# install, then run the
# whole test suite" / "# install, then build the documentation site") in the README.
set -euo pipefail
README="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/README.md"
case "${1:-}" in
    example) marker='^# install, then train the main example' ;;
    test) marker='^# install, then run the whole test suite' ;;
    quick) marker='^# install, then run the quick tier' ;;
    docs) marker='^# install, then build the documentation site' ;;
    *) echo "usage: $0 example|test|quick|docs" >&2; exit 2 ;;
esac
command="$(awk -v marker="$marker" '$0 ~ marker { if ((getline line) > 0) print line; exit }' "$README")"
[ -n "$command" ] || { echo "$0: no line after /$marker/ in $README" >&2; exit 1; }
echo "$command"
