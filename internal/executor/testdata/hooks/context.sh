#!/usr/bin/env bash
# A PostToolUse hook that adds a note for the model.
cat >/dev/null
echo '{"hookSpecificOutput":{"hookEventName":"PostToolUse","additionalContext":"Reminder from the project: run make test after editing."}}'
