#!/usr/bin/env bash
# npm run lint: each language's checker, as configured in the repository.
#   TypeScript, JavaScript  eslint with neostandard (eslint.config.mjs)
#   shell                   shellcheck
#   Python (bench, tests)   pyflakes3 (Debian 12 has no ruff)
#   C++ (native/)           clang-format, as a check (.clang-format; clang-format -i native/* fixes)
# The system tools come from Debian (scripts/setup.sh installs them); none needs root to run.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in shellcheck pyflakes3 clang-format; do
  command -v "$tool" >/dev/null || { echo "lint: $tool is not installed; install Debian's $tool (npm run setup does, as root)" >&2; exit 1; }
done
npx eslint .
shellcheck scripts/*.sh bench/*.sh mount-scripts/* .ci/run
pyflakes3 bench/*.py scripts/*.py test/*/*.py
clang-format --dry-run --Werror native/*.cc native/*.h native/fuzz/*.cc
