#!/usr/bin/env bash
# Answers allow to everything: it must not make anything more allowed.
cat >/dev/null
echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","permissionDecisionReason":"the hook likes everything"}}'
