#!/usr/bin/env bash
# The README stays true to the tree (CTest: docs): every document it names exists, and its layout
# table names every top-level folder of the repository.
set -u
cd "$(dirname "$0")/.."
fail=0
while IFS= read -r doc; do
  [ -f "$doc" ] || { echo "docs: README.md names $doc, which does not exist"; fail=1; }
done < <(grep -oE '(docs|recipes|assets)/[A-Za-z0-9_./-]*\.md' README.md | sort -u)
for d in */; do
  d=${d%/}
  case $d in build*|Testing|runs) continue ;; esac
  git ls-files --error-unmatch "$d" > /dev/null 2>&1 || continue  # not in the repository
  grep -qE "^\| \`$d/\`" README.md || { echo "docs: $d/ is missing from README.md's layout table"; fail=1; }
done
for doc in docs/*.md; do
  grep -q "\`$doc\`" README.md || { echo "docs: README.md does not name $doc"; fail=1; }
done
[ $fail -eq 0 ] && echo "docs: ok"
exit $fail
