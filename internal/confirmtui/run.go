package confirmtui

import (
	"context"
	"errors"
	"io"

	tea "charm.land/bubbletea/v2"
)

// Run shows the terminal approver on in and out (a terminal) until the
// person quits (q, Ctrl-C) or ctx ends; the terminal is restored before
// it returns, and the view's background work has stopped or is stopping.
func Run(ctx context.Context, seat Seat, editor Editor, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := tea.NewProgram(New(ctx, seat, editor), tea.WithContext(ctx), tea.WithInput(in), tea.WithOutput(out),
		tea.WithoutSignalHandler())
	_, err := p.Run()
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil // stopped by a signal: a clean exit
	}
	return err
}
