#!/usr/bin/env bash
# Hangs, after starting a grandchild in a session of its own that writes
# its pid to hang.pid in the project.
cat >/dev/null
setsid sh -c 'echo $$ > "$CLAUDE_PROJECT_DIR/hang.pid"; exec sleep 300' >/dev/null 2>&1 &
while [ ! -s "$CLAUDE_PROJECT_DIR/hang.pid" ]; do sleep 0.01; done
sleep 300
