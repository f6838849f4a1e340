#!/bin/sh
# Renew requirements/run.lock and requirements/dev.lock: install each set of pyproject.toml into
# a fresh virtualenv and record the exact versions pip resolved (the project itself excluded).
# Usage: sh requirements/lock.sh [python3]
set -eu
python="${1:-python3}"
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# run.lock: the package and its `node` and `embedded` extras; dev.lock: the same and the
# `dev` dependency group.
for name in run dev; do
    "$python" -m venv "$work/$name"
    "$work/$name/bin/pip" install --quiet --upgrade pip
    if [ "$name" = dev ]; then
        "$work/$name/bin/pip" install --quiet "$root[node,embedded]" --group "$root/pyproject.toml:dev"
    else
        "$work/$name/bin/pip" install --quiet "$root[node,embedded]"
    fi
    {
        echo "# Exact versions of chronos-scheduler[node,embedded]$([ "$name" = dev ] && echo ' and the dev dependency group') (renew: make lock)."
        "$work/$name/bin/pip" freeze --exclude-editable | grep -v '^chronos-scheduler' | LC_ALL=C sort -f
    } > "$root/requirements/$name.lock"
    echo "requirements/$name.lock: $(grep -vc '^#' "$root/requirements/$name.lock") packages"
done
