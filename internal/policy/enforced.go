package policy

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Share is the part of the fleet's calls a revision being rolled out
// decides: those of a percentage of the principals, chosen by a stable
// hash of the principal (so that one agent sees one policy on every
// executor, and widening the share keeps those already in it), and those
// of the principals and workspaces it names.
type Share struct {
	Percent    int      `json:"percent,omitempty"`
	Principals []string `json:"principals,omitempty"`
	Workspaces []string `json:"workspaces,omitempty"`
}

// Whole says the share is the whole fleet: 100%, or nothing named (a
// plain push).
func (s Share) Whole() bool {
	return s.Percent >= 100 || (s.Percent == 0 && len(s.Principals) == 0 && len(s.Workspaces) == 0)
}

func (s Share) valid() error {
	if s.Percent < 0 || s.Percent > 100 {
		return fmt.Errorf("a share of %d%%: a share is 1 to 100", s.Percent)
	}
	for _, p := range s.Principals {
		if p == "" {
			return errors.New("an empty principal in the share")
		}
	}
	for _, w := range s.Workspaces {
		if w == "" {
			return errors.New("an empty workspace in the share")
		}
	}
	return nil
}

// Holds says whether a call of principal, run in workspace, is in the
// share.
func (s Share) Holds(principal, workspace string) bool {
	if slices.Contains(s.Principals, principal) || (workspace != "" && slices.Contains(s.Workspaces, workspace)) {
		return true
	}
	return s.Percent > 0 && Cohort(principal) < s.Percent
}

// Cohort is principal's place in a rollout, 0 to 99: a share of N% holds
// the principals whose cohort is below N. It depends on the principal
// alone, so that every executor, and every rollout, puts a principal in
// the same place.
func Cohort(principal string) int {
	h := sha256.Sum256([]byte("toolbus rollout cohort\x00" + principal))
	return int(binary.BigEndian.Uint64(h[:8]) % 100)
}

// String says the share in a line: "30%", "30% and principals a, b".
func (s Share) String() string {
	if s.Whole() {
		return "all"
	}
	var parts []string
	if s.Percent > 0 {
		parts = append(parts, fmt.Sprintf("%d%% of principals", s.Percent))
	}
	if len(s.Principals) > 0 {
		parts = append(parts, "principals "+strings.Join(s.Principals, ", "))
	}
	if len(s.Workspaces) > 0 {
		parts = append(parts, "workspaces "+strings.Join(s.Workspaces, ", "))
	}
	return strings.Join(parts, "; ")
}

// Enforced is what an executor enforces: one policy for every call, or,
// during a staged rollout, a second one for the calls in a share.
type Enforced struct {
	Stable *Policy
	// Next, when not nil, decides the calls in Share.
	Next  *Policy
	Share Share
}

// Only is an Enforced of one policy for every call.
func Only(p *Policy) *Enforced { return &Enforced{Stable: p} }

// For is the policy that decides a call of principal in workspace. A
// call asks once, and keeps the answer for its whole life.
func (e *Enforced) For(principal, workspace string) *Policy {
	if e.Next != nil && e.Share.Holds(principal, workspace) {
		return e.Next
	}
	return e.Stable
}

// Revisions says what is in force, for logs and health: "REV", or
// "REV, NEXT for SHARE".
func (e *Enforced) Revisions() string {
	if e.Next == nil {
		return e.Stable.Revision()
	}
	return fmt.Sprintf("%s, %s for %s", e.Stable.Revision(), e.Next.Revision(), e.Share)
}
