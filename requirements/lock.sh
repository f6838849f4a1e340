#!/bin/sh
# Renew requirements/run.lock and requirements/dev.lock: install each set of pyproject.toml into
# a fresh virtualenv and record the exact versions pip resolved (the project itself excluded).
# Usage: sh requirements/lock.sh [python3]
set -eu
python="${1:-python3}"
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for set in run:embedded dev:dev; do
    name="${set%%:*}"
    extra="${set#*:}"
    "$python" -m venv "$work/$name"
    "$work/$name/bin/pip" install --quiet --upgrade pip
    "$work/$name/bin/pip" install --quiet "$root[$extra]"
    {
        echo "# Exact versions of chronos-scheduler[$extra]'s dependencies (renew: make lock)."
        "$work/$name/bin/pip" freeze --exclude-editable | grep -v '^chronos-scheduler' | LC_ALL=C sort -f
    } > "$root/requirements/$name.lock"
    echo "requirements/$name.lock: $(grep -vc '^#' "$root/requirements/$name.lock") packages"
done
