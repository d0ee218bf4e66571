#!/bin/sh
# The discovery command of the example (tools.discoveryCommand): it prints
# the declarations of the project's tools, as Gemini CLI reads them, on
# stdout. toolbus runs it from the workspace root, without a shell.
cat <<'JSON'
[{"function_declarations": [
  {"name": "calc",
   "description": "Evaluate an arithmetic expression: numbers, + - * / % and parentheses. Returns {\"result\": N}.",
   "parameters": {"type": "object", "properties": {
     "expression": {"type": "string", "description": "for example 2*(3+4)/5"}},
     "required": ["expression"], "additionalProperties": false}},
  {"name": "word_count",
   "description": "Count the lines, words and characters of a text, as wc does. Returns {\"lines\": L, \"words\": W, \"characters\": C}.",
   "parameters": {"type": "object", "properties": {
     "text": {"type": "string", "description": "the text to count"}},
     "required": ["text"], "additionalProperties": false}}
]}]
JSON
