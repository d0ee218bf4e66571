#!/usr/bin/env bash
# Wants a person to see every read.
cat >/dev/null
echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"reads are watched in this project"}}'
