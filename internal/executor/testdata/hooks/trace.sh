#!/usr/bin/env bash
# Keeps what it was told of its call's trace, its input and its
# TRACEPARENT, in the workspace, and decides nothing.
cat >"$CLAUDE_PROJECT_DIR/hook-input.json"
printf '%s' "$TRACEPARENT" >"$CLAUDE_PROJECT_DIR/hook-traceparent"
