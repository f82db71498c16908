#!/usr/bin/env bash
# Regenerates the "Every field" block of recipes/README.md from `horizon train --schema`
# (tests/train/recipe_test.cpp fails when the two disagree).
set -euo pipefail
cd "$(dirname "$0")/.."
HZ=${1:-build/horizon}
head=$(sed -n '1,/^## Every field/p' recipes/README.md)
{
  echo "$head"
  echo
  echo 'The list below is the output of `build/horizon train --schema` (generated from the same table the'
  echo 'parser uses; `scripts/gen_recipe_docs.sh` rewrites it and a test checks it):'
  echo
  echo '```'
  "$HZ" train --schema
  echo '```'
} > recipes/README.md.tmp
mv recipes/README.md.tmp recipes/README.md
