#!/usr/bin/env bash
# A Claude Code PreToolUse hook on Bash: no shell line may run curl. It
# reads the call on stdin and blocks with exit code 2, its reason on stderr.
if grep -q curl; then
	echo "curl is not allowed in this project; use web_fetch" >&2
	exit 2
fi
exit 0
