#!/usr/bin/env bash
# A broken hook.
echo "hook crashed: its configuration is missing" >&2
exit 1
