# Sourced by scripts/pip-wheelhouse.sh and scripts/venv-snapshot.sh: what their caches under
# $POPULORA_CACHE_DIR (~/.cache/populora by default) share. Each entry is a directory NAME-KEY, used only once its
# marker (.complete) exists.
#
#   cache_root SUB            the cache's directory SUB (wheelhouse, venvs)
#   pip_config_key PIP...     pip's configuration as PIP (a command: .venv/bin/pip, or python -m pip) reads it, and
#                             the content of the constraint files it names: part of a key, since both decide what
#                             pip resolves
#   cache_sweep ROOT KEEP     removes what a killed build left (.tmp-*, after a day) and entries no install used for
#                             30 days (their marker is touched at each use; other branches keep theirs), KEEP aside
#   cache_publish TMP DEST    TMP, complete, becomes DEST by one rename: an interrupted or concurrent build never
#                             leaves an entry used half-made; if a concurrent build published first (or anything
#                             failed), TMP is removed and DEST is whatever was there: the caller checks DEST/.complete

cache_root() {
  echo "${POPULORA_CACHE_DIR:-$HOME/.cache/populora}/$1"
}

pip_config_key() {
  local config f
  config=$("$@" config list 2>/dev/null || true)
  echo "$config"
  # pip config constraint='A B' (PIP_CONSTRAINT too)
  for f in $(echo "$config" | sed -n "s/^[^=]*\.constraint='\(.*\)'$/\1/p"); do
    echo "== $f"; cat "$f" 2>/dev/null || true
  done
}

cache_sweep() {
  find "$1" -mindepth 1 -maxdepth 1 -name '.tmp-*' -mmin +1440 -exec rm -rf {} + 2>/dev/null || true
  find "$1" -mindepth 2 -maxdepth 2 -name .complete -mtime +30 ! -path "$2/.complete" -printf '%h\n' 2>/dev/null |
    xargs -r rm -rf || true
}

cache_publish() {  # never fails (the callers run under set -e, and their ERR traps do not reach into functions)
  { chmod 755 "$1" && touch "$1/.complete" && mv -T "$1" "$2"; } 2>/dev/null || rm -rf "$1"   # mktemp made it 0700
}
