//go:build !linux

package tool

import "os"

// tempFile is a temporary file that is already unlinked: it disappears
// with its last descriptor, also if the process dies. Elsewhere than
// Linux nothing confines the tool processes (no Landlock), so its moment
// with a name hides nothing they could not read anyway.
func tempFile() (*os.File, error) {
	f, err := os.CreateTemp("", SpoolFilePrefix+"*")
	if err != nil {
		return nil, err
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
