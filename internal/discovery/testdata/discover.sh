#!/bin/sh
# A discovery command of the tests: it appends a line to $2 (so that the
# tests count its runs) and prints the declarations in $1.
echo run >> "$2"
cat "$1"
