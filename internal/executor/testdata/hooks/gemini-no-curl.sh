#!/usr/bin/env bash
# A Gemini CLI BeforeTool hook: answers with a JSON decision.
input=$(cat)
case "$input" in
*curl*) echo '{"decision":"deny","reason":"curl is blocked by the project hook"}' ;;
*) echo '{"decision":"allow"}' ;;
esac
