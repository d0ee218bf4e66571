package executor

import (
	"errors"
	"fmt"
	"slices"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/tool"
)

// The policy judges files by name, and a tool opens them by name again
// after the decision: in between, the name can become a link to .env,
// another file can be renamed onto it, or it can be hard-linked to a key.
// So the executor records what each name led to when the policy was shown
// it (the file's device and inode, and its number of names), and a tool
// checks every file it opens against that record (tool.Call.Opened)
// before it reads or writes a byte.
//
// The check is by identity rather than by the opened descriptor's path in
// /proc/self/fd: a path cannot tell a file renamed onto the name from the
// one judged, nor a hard link from the only name of a file, and the
// identity costs nothing at the open (the read's fstat has it) and one
// fstat at the decision, of the lookup the executor makes there anyway. A
// file to be created has no identity yet: the tool holds its directory
// open and shows where that really is (/proc/self/fd), which must be a
// path the policy was shown.

// judgedFile is what one path led to when the policy was shown it.
type judgedFile struct {
	path string
	tool.File
}

// judge records that the policy was shown path p leading to f.
func (c *call) judge(p string, f tool.File) {
	c.judgedMu.Lock()
	c.judged = append(c.judged, judgedFile{path: p, File: f})
	c.judgedMu.Unlock()
}

// opened implements tool.Call.Opened: f, a file the tool opened or is
// about to create, must be one the policy judged for this call, and may
// have other names only if the policy was told so.
func (c *call) opened(f tool.File) error {
	c.judgedMu.Lock()
	defer c.judgedMu.Unlock()
	if f.ID == (tool.FileID{}) {
		for _, j := range c.judged {
			if f.Real == j.path || f.Real == j.Real {
				return nil
			}
		}
		return fmt.Errorf("it would be created at %s, which the policy was not shown: a directory on the way changed after the check", f.Real)
	}
	for _, j := range c.judged {
		if j.ID != f.ID {
			continue
		}
		if f.Links > 1 && j.Links <= 1 {
			return fmt.Errorf("it has %d names now and had one when the policy judged it: a hard link made since could make it any file", f.Links)
		}
		return nil
	}
	return errors.New("it is not the file the policy was shown: the name was made to lead to another file after the check")
}

// refused implements tool.Call.Refused, judging files a tool picked
// itself: the policy's denied_paths for this call, shown those files (and
// where links lead them, and which have other names) instead of the ones
// its arguments name. A file with other names that the call's own
// decision was not shown is judged alone, by the decision as for a call
// naming only it: a tool reading many files cannot ask about each, so
// anything but ALLOW refuses it. The files kept are recorded for the
// tool's check of what it opens.
func (c *call) refused(files []string) (map[string]bool, error) {
	lr, _ := c.impl.(tool.LinkResolver)
	looked := make([]judgedFile, len(files))
	shown := make([]string, 0, len(files))
	var linked []string
	for i, p := range files {
		looked[i].path = p
		shown = append(shown, p)
		if lr == nil {
			continue
		}
		f, err := lr.Look(p)
		if err != nil {
			continue
		}
		looked[i].File = f
		if f.Real != p {
			shown = append(shown, f.Real)
		}
		if f.Links > 1 {
			linked = append(linked, f.Real)
		}
	}
	pol := c.pol
	denied, err := pol.DeniedPaths(c.ctx, c.input(c.args, shown, linked, nil))
	if err != nil {
		return nil, fmt.Errorf("the policy cannot judge the files this call would read, so none is read: %v", err)
	}
	refused := make(map[string]bool)
	for _, j := range looked {
		switch {
		case denied[j.path] || (j.Real != "" && denied[j.Real]):
			refused[j.path] = true
		case j.Links > 1 && !slices.Contains(c.hardLinks, j.Real) && !c.allowedAlone(j):
			refused[j.path] = true
		default:
			c.judge(j.path, j.File)
		}
	}
	return refused, nil
}

// allowedAlone asks the policy's decision about reading one file with
// other names, as if the call named only it.
func (c *call) allowedAlone(j judgedFile) bool {
	paths := []string{j.path}
	if j.Real != j.path {
		paths = append(paths, j.Real)
	}
	return c.pol.Decide(c.ctx, c.input(c.args, paths, []string{j.Real}, nil)).Verdict == events.Allow
}
