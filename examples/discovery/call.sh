#!/bin/sh
# The call command of the example (tools.callCommand): toolbus runs it
# from the workspace root with the tool's name as its last argument and
# the arguments, a JSON object, on stdin. Output on stdout is the result;
# anything on stderr, or a non-zero exit, makes the call fail with the
# Stdout/Stderr/Error/Exit Code/Signal block.
#
# POSIX sh and awk only. The executor has checked the arguments against
# the declared schema (one string property, nothing else) before this
# runs, so a small reader of one JSON string will do.

# field NAME: the string value of NAME in the JSON object on stdin,
# unescaped (\uXXXX is kept as one character, "?": the counts are of
# characters as written).
field() {
	awk -v key="$1" '
	{ s = s $0 "\n" }
	END {
		i = index(s, "\"" key "\"")
		if (i == 0) { print "no " key " in the arguments" > "/dev/stderr"; exit 2 }
		rest = substr(s, i + length(key) + 2)
		sub(/^[ \t\r\n]*:[ \t\r\n]*/, "", rest)
		if (substr(rest, 1, 1) != "\"") { print key " is not a string" > "/dev/stderr"; exit 2 }
		out = ""
		for (j = 2; j <= length(rest); j++) {
			c = substr(rest, j, 1)
			if (c == "\"") break
			if (c == "\\") {
				j++; e = substr(rest, j, 1)
				if (e == "n") c = "\n"; else if (e == "t") c = "\t"; else if (e == "r") c = "\r"
				else if (e == "b") c = "\b"; else if (e == "f") c = "\f"
				else if (e == "u") { c = "?"; j += 4 } else c = e
			}
			out = out c
		}
		printf "%s", out
	}'
}

case "$1" in
calc)
	expr=$(field expression) || exit 2
	# Only arithmetic reaches awk: it would run anything else.
	if [ -z "$expr" ] || printf '%s' "$expr" | LC_ALL=C grep -q '[^0-9.+*/%() -]'; then
		echo "not an arithmetic expression: $expr" >&2
		exit 1
	fi
	# awk reports a malformed expression on stderr, which fails the call.
	awk "BEGIN { r = ($expr); if (r != r || r == r + 1) { print \"not a finite number (a division by zero?)\" > \"/dev/stderr\"; exit 1 }
		printf \"{\\\"result\\\": %.15g}\\n\", r }"
	;;
word_count)
	field text | wc -lwm | awk '{ printf "{\"lines\": %d, \"words\": %d, \"characters\": %d}\n", $1, $2, $3 }'
	;;
*)
	echo "no tool $1" >&2
	exit 2
	;;
esac
