#!/usr/bin/env bash
# Install the previous release beside this checkout, for `make upgrade-test`: a git
# worktree of its commit (releases.json) under .state/upgrade/previous, with its own
# virtualenv holding the product as that release pinned it. Idempotent: a worktree at
# the right commit and a finished install are kept.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=.state/upgrade/previous
commit=$(.venv/bin/python -m pos_lambda_dev.releases previous-commit)
if ! git cat-file -e "${commit}^{commit}" 2>/dev/null; then
  echo "previous release: fetching ${commit} (a shallow clone lacks it)"
  git fetch --quiet origin "${commit}" || git fetch --quiet --unshallow origin
fi
if [ "$(git -C "${root}" rev-parse HEAD 2>/dev/null || true)" != "${commit}" ]; then
  git worktree remove --force "${root}" 2>/dev/null || rm -rf "${root}"
  git worktree prune
  mkdir -p "$(dirname "${root}")"
  git worktree add --quiet --detach "${root}" "${commit}"
fi
if [ ! -f "${root}/.venv/.installed" ]; then
  echo "previous release: installing ${commit:0:7} into ${root}/.venv (pip, from its constraints)"
  python3.11 -m venv "${root}/.venv"
  "${root}/.venv/bin/pip" install --quiet --upgrade pip
  "${root}/.venv/bin/pip" install --quiet -c "${root}/constraints.txt" -e "${root}"
  touch "${root}/.venv/.installed"
fi
echo "previous release: ${commit:0:7} in ${root} ($("${root}/.venv/bin/python" -c 'import importlib.metadata as m; print(m.version("pos-lambda"))'))"
