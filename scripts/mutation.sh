#!/usr/bin/env bash
# Go mutation testing of the security-critical code (docs/testing.md).
# Slow (each mutant builds and runs a test binary): not part of
# scripts/test.sh. The Rego policy's mutation check is, and runs in about
# 0.2 s a mutant (internal/policy/mutant).
#
#   scripts/mutation.sh [group...]    groups: builtin policy shell executor audit sandbox facade protect capabilities counters trail (default: all)
#
# Each group names its files and the tests that judge them; a -run filter
# keeps the executor's to those that exercise the code (its whole -short
# suite takes two minutes a mutant). GOMUTATE_WORKERS sets how many
# mutants run at once (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
workers=${GOMUTATE_WORKERS:-2}
mutate() { go run ./scripts/gomutate -workers "$workers" "$@"; }

groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(builtin policy shell executor audit sandbox facade protect capabilities counters trail)
for g in "${groups[@]}"; do
	echo "== $g"
	case $g in
	builtin)
		mutate -test ./internal/builtin/ $(git ls-files 'internal/builtin/*.go' | grep -v '_test.go$' | grep -v '_other.go$') ;;
	policy)
		# The sandbox tests run shell lines under bwrap for seconds each
		# and judge none of these files.
		mutate -test ./internal/policy/ -skip 'TestSandbox' $(git ls-files 'internal/policy/*.go' | grep -v '_test.go$') ;;
	shell)
		mutate -test ./internal/policy/shell/,./internal/policy/ -skip 'TestSandbox' $(git ls-files 'internal/policy/shell/*.go' | grep -v '_test.go$') ;;
	executor)
		mutate -test ./internal/executor/ -run 'TestDecisionCache|TestACachedAllow|TestAClaimNever|TestHardLinkToAKey|TestEveryDecisionIsRecorded' \
			internal/executor/decisions.go
		mutate -test ./internal/executor/ -run 'TestAgentUser|TestAProvenAgent|TestConfirmationOutcomes|TestCallerConfirms|TestModifyWithEditor|TestHugeEdit|TestProceedAlways|TestQuestion' \
			internal/executor/confirm.go
		mutate -test ./internal/executor/ -run 'TestRemembered|TestProceedAlways|TestHardLinkToAKey|TestAnExecutorTrusts|TestARevokedApproval|TestAllowlist' \
			internal/executor/allowlist.go ;;
	audit)
		mutate -test ./internal/audit/ internal/audit/join.go ;;
	sandbox)
		# What confines every process toolbus starts, judged by the
		# confined trees of internal/proctree (real Landlock).
		mutate -test ./internal/sandbox/,./internal/proctree/ \
			internal/sandbox/sandbox.go internal/sandbox/sandbox_linux.go internal/proctree/proctree.go ;;
	facade)
		# Who a client of the MCP facade is: its credential, its
		# sessions, and the principal its subjects name.
		mutate -test ./internal/mcp/ -run 'TestTokensFile|TestParseTokens|TestFacadeHTTPRefusesStrangers|TestFacadeHTTPChecksHostAndOrigin|TestFacadeHTTPTellsOnce|TestClientSessionsAreBoundedAndFreed|TestFacadeSessionsBelongToTheirClient|TestFacadeTakesAnAnswer|TestFacadeRefusesAnAlteredRequestState|FuzzParseTokens' \
			internal/mcp/facade_tokens.go internal/mcp/facade_http.go
		mutate -test ./internal/events/ internal/events/principal.go ;;
	protect)
		# Which files are the code the settings run (input.protected).
		mutate -test ./internal/protect/ internal/protect/protect.go ;;
	capabilities)
		# Capabilities and their owners, the loop guards' counts, the
		# facade's sealed request states; -only keeps to the lines of
		# those functions (re-read them when the files change).
		mutate -test ./internal/events/ -run 'TestCapabilities|FuzzIsCapability' internal/events/capability.go
		mutate -test ./internal/builtin/ -run 'TestBackground|TestShellIDs' internal/tool/owner.go
		mutate -test ./internal/builtin/ -run 'TestBackground|TestShellIDs' -only 'shell.go:2[0-4][0-9]:' internal/builtin/shell.go
		mutate -test ./internal/executor/ -run 'TestRepeatsCount|TestLoopGuard|TestSession|TestALoop|TestCallsWithout|TestAnotherPrincipalsSession|TestNoCounts' \
			internal/executor/sessions.go
		mutate -test ./internal/mcp/ -run 'TestFacadeRefuses|TestFacadeAnswersAnother|FuzzRequestState|TestFacadeAsksAModernClientsUser$' \
			-only 'facade_mrtr.go:(2[4-6][0-9]|3[23][0-9]):' internal/mcp/facade_mrtr.go ;;
	counters)
		# The counts calls are judged by: kept by each executor and told
		# to the others; the message that tells them; the rates held to
		# them.
		mutate -test ./internal/counters/ internal/counters/fleet.go
		mutate -test ./internal/events/ -run 'Counted' internal/events/count.go
		mutate -test ./internal/executor/ -run 'TestRateLimits|TestARate|TestAnExactRate|TestARefusedCall|TestACallOfExactly|TestAPrincipalCannotEscape|TestConcurrencyLimit|TestAQueue|TestCancelAndDeadlineWhileQueued' \
			internal/executor/limits.go ;;
	trail)
		# What keeps the audit trail whole: each principal's budgets of
		# recorded bytes, and the fill's high-water mark past which the
		# fleet refuses calls rather than evict a record.
		mutate -test ./internal/executor/ -run 'TestRecordBudget|TestAFloodingCaller|TestShareOfTheTrail|FuzzShareBounds|TestTheRetryAfter|TestTheBudgetForgets|TestRefusalsAreTold|TestAPacedFlood|TestTheShareIsSplit|TestTheFleetFailsClosed|TestACallTheTrailRefuses|TestTheMarkRefuses' \
			internal/executor/budget.go internal/executor/trail.go ;;
	*)
		echo "unknown group $g"; exit 2 ;;
	esac
done
